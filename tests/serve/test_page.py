"""The browser page of `wenet-lite serve` in headless Chromium: a file chosen in the page
streams through WeNet's protocol and shows `wenet-lite stream`'s transcript with word times;
the microphone (Chromium's fake capture device playing a WAV) streams and shows a transcript."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.serve.conftest import ServerProcess
from tests.serve.test_server import stream_reference

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def wav(test_audio, tmp_path_factory) -> Path:
    """Two test utterances 3 s apart, 16-bit PCM: two segments."""
    quiet = np.random.default_rng(1).normal(0, 10 ** (-70 / 20), 3 * 16000)
    audio = np.concatenate([test_audio[6], quiet, test_audio[7]])
    path = tmp_path_factory.mktemp("page") / "speech.wav"
    sf.write(path, np.clip(audio, -1, 1), 16000, subtype="PCM_16")
    return path


def _browser(capture: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for exe in (CHROMIUM, DRIVER):
        assert shutil.which(exe), f"{exe} is missing: apt-get install chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,760",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={capture}%noloop",
    ):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def _wait_state(driver, state: str, timeout: float = 60) -> None:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    body = driver.find_element(By.TAG_NAME, "body")
    while body.get_attribute("data-state") != state:
        assert time.monotonic() < deadline, driver.find_element(By.ID, "status").text
        time.sleep(0.1)


@pytest.mark.slow
def test_page_streams_a_file_and_the_microphone(server: ServerProcess, tiny, wav, capsys):
    from selenium.webdriver.common.by import By

    reference = stream_reference(
        capsys, tiny.path, [str(wav)], "--chunk-size", "4", "--left-chunks", "-1"
    )[str(wav)]
    assert len(reference) == 2
    driver = _browser(wav)
    try:
        driver.get(f"http://127.0.0.1:{server.port}/")
        assert driver.find_element(By.ID, "served-by").text == "page served by worker 0 of 1"
        driver.find_element(By.ID, "file").send_keys(str(wav))
        _wait_state(driver, "finished")
        assert driver.find_element(By.ID, "transcript").text == " ".join(
            r["text"] for r in reference
        )
        items = driver.find_elements(By.CSS_SELECTOR, "#finals li")
        assert len(items) == 2
        for item, ref in zip(items, reference):
            first = ref["words"][0]
            shown = f"{first['word']} {first['start']:.2f}–{first['end']:.2f}"
            assert shown in item.find_element(By.CLASS_NAME, "words").text
        # The microphone: Chromium plays the WAV as its capture device, at its own rate.
        seconds = sf.info(str(wav)).duration
        driver.find_element(By.ID, "start").click()
        time.sleep(seconds + 1.5)
        driver.find_element(By.ID, "stop").click()
        _wait_state(driver, "finished")
        assert driver.find_element(By.ID, "transcript").text
        assert driver.find_elements(By.CSS_SELECTOR, "#finals li")
    finally:
        driver.quit()
    received = [
        float(s)
        for s in re.findall(r"\(wenet, [^)]*\): [\d.]+ s open, ([\d.]+) s of audio", server.log())
    ]
    assert len(received) >= 2 and received[-1] >= seconds, received
