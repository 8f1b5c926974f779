// The page's logic: the microphone (getUserMedia + an AudioWorklet) or a chosen file, resampled
// to 16 kHz, sent as 16-bit PCM over WeNet's websocket protocol on /wenet; partial results shown
// live, final segments with their word times. Everything is served by `wenet-lite serve`.
"use strict";

const TARGET_RATE = 16000;
const BLOCK_S = 0.1;
const $ = (id) => document.getElementById(id);
let socket = null;
let capture = null; // {context, source, node, stream} while the microphone runs
const finalTexts = [];

function setStatus(text) { $("status").textContent = text; }

function resetView() {
  $("partial").textContent = "";
  $("finals").replaceChildren();
  $("transcript").textContent = "";
  finalTexts.length = 0;
  document.body.dataset.state = "streaming";
}

function seconds(ms) { return (ms / 1000).toFixed(2); }

function addFinal(best) {
  const item = document.createElement("li");
  const words = best.word_pieces || [];
  const span = document.createElement("span");
  span.className = "span";
  if (words.length) span.textContent = `${seconds(words[0].start)}–${seconds(words[words.length - 1].end)} s`;
  item.append(span, document.createTextNode(best.sentence));
  const detail = document.createElement("div");
  detail.className = "words";
  for (const w of words) {
    const entry = document.createElement("span");
    entry.textContent = `${w.word} ${seconds(w.start)}–${seconds(w.end)}`;
    detail.append(entry);
  }
  item.append(detail);
  $("finals").append(item);
  finalTexts.push(best.sentence);
  $("transcript").textContent = finalTexts.join(" ");
}

function onMessage(message, onReady) {
  if (message.status === "failed") { setStatus(`server error: ${message.message}`); return; }
  if (message.type === "server_ready") { onReady(); return; }
  if (message.type === "partial_result") {
    $("partial").textContent = JSON.parse(message.nbest)[0].sentence;
  } else if (message.type === "final_result") {
    const best = JSON.parse(message.nbest)[0];
    if (best.sentence) addFinal(best);
    $("partial").textContent = "";
  } else if (message.type === "speech_end") {
    setStatus("finished");
    document.body.dataset.state = "finished";
  }
}

// Opens a WeNet session; onReady runs once the server has answered the start signal.
function openSession(onReady) {
  resetView();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  // A server started with --token-file is opened as http://HOST:PORT/?token=TOKEN: pass it on.
  const token = new URLSearchParams(location.search).get("token");
  const query = token ? `?token=${encodeURIComponent(token)}` : "";
  const ws = new WebSocket(`${scheme}//${location.host}/wenet${query}`);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => ws.send(JSON.stringify({ signal: "start", nbest: 1, continuous_decoding: true }));
  ws.onmessage = (event) => onMessage(JSON.parse(event.data), onReady);
  ws.onerror = () => setStatus("connection failed");
  ws.onclose = (event) => {
    if (document.body.dataset.state !== "finished") {
      setStatus(`connection closed: ${event.code} ${event.reason}`);
      document.body.dataset.state = "closed";
    }
    buttons(false);
  };
  return ws;
}

// float samples in [-1, 1] -> 16-bit PCM (what a 16-bit WAV file holds: exact round trip)
function toPcm16(samples) {
  const pcm = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    pcm[i] = Math.max(-32768, Math.min(32767, Math.round(samples[i] * 32768)));
  }
  return pcm.buffer;
}

// Streaming resampler to 16 kHz: a box filter over the rate ratio (against aliasing), then
// linear interpolation. State carries over between blocks.
class Resampler {
  constructor(fromRate) {
    this.step = fromRate / TARGET_RATE;
    this.width = Math.max(1, Math.round(this.step));
    this.history = new Float32Array(this.width);
    this.sum = 0;
    this.filled = 0;
    this.time = 0; // position of the next output sample, in input samples of the current block
    this.previous = 0; // the last filtered sample of the previous block (index -1)
  }
  process(input) {
    if (this.step === 1) return input;
    const filtered = new Float32Array(input.length);
    for (let i = 0; i < input.length; i++) {
      const slot = this.filled % this.width;
      this.sum += input[i] - this.history[slot];
      this.history[slot] = input[i];
      this.filled++;
      filtered[i] = this.sum / this.width;
    }
    const out = [];
    while (this.time < filtered.length) {
      const i = Math.floor(this.time);
      const frac = this.time - i;
      const left = i === 0 ? this.previous : filtered[i - 1];
      out.push(left + (filtered[i] - left) * frac);
      this.time += this.step;
    }
    this.time -= filtered.length;
    this.previous = filtered[filtered.length - 1];
    return Float32Array.from(out);
  }
}

function buttons(running) {
  $("start").disabled = running;
  $("file").disabled = running;
  $("stop").disabled = !running;
}

async function startMicrophone() {
  buttons(true);
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
  } catch (error) {
    setStatus(`no microphone: ${error.message}`);
    buttons(false);
    return;
  }
  // The context runs at the device's rate and the page resamples: asked for 16 kHz, Chrome's
  // own conversion of a 16 kHz source through a 44.1 kHz device recognised worse.
  const context = new AudioContext();
  await context.audioWorklet.addModule("/capture-worklet.js");
  const source = context.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(context, "capture-processor");
  const resampler = new Resampler(context.sampleRate);
  const waiting = []; // audio captured before the server is ready: sent then, none lost
  node.port.onmessage = (event) => waiting.push(resampler.process(event.data));
  source.connect(node);
  capture = { context, source, node, stream };
  socket = openSession(() => {
    setStatus(`listening (microphone at ${context.sampleRate} Hz, sent at 16 kHz)`);
    for (const block of waiting.splice(0)) socket.send(toPcm16(block));
    node.port.onmessage = (event) => {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(toPcm16(resampler.process(event.data)));
    };
  });
}

function stopMicrophone() {
  if (capture) {
    capture.source.disconnect();
    capture.node.port.onmessage = null;
    capture.stream.getTracks().forEach((t) => t.stop());
    capture.context.close();
    capture = null;
  }
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ signal: "end" }));
    setStatus("finishing…");
  }
  $("stop").disabled = true;
}

async function streamFile(file) {
  buttons(true);
  let samples;
  try {
    // decodeAudioData resamples to the context's rate: 16 kHz. Channels are averaged.
    const buffer = await new OfflineAudioContext(1, 1, TARGET_RATE).decodeAudioData(await file.arrayBuffer());
    samples = buffer.getChannelData(0);
    if (buffer.numberOfChannels > 1) {
      samples = Float32Array.from(samples);
      for (let c = 1; c < buffer.numberOfChannels; c++) {
        const other = buffer.getChannelData(c);
        for (let i = 0; i < samples.length; i++) samples[i] += other[i];
      }
      for (let i = 0; i < samples.length; i++) samples[i] /= buffer.numberOfChannels;
    }
  } catch (error) {
    setStatus(`cannot read ${file.name}: ${error.message || error}`);
    buttons(false);
    return;
  }
  socket = openSession(async () => {
    setStatus(`streaming ${file.name} (${(samples.length / TARGET_RATE).toFixed(1)} s)`);
    const block = Math.round(BLOCK_S * TARGET_RATE);
    for (let i = 0; i < samples.length; i += block) {
      if (socket.readyState !== WebSocket.OPEN) return;
      socket.send(toPcm16(samples.subarray(i, i + block)));
      await new Promise((resolve) => setTimeout(resolve, 1000 * BLOCK_S / 4)); // 4x real time
    }
    socket.send(JSON.stringify({ signal: "end" }));
    setStatus("finishing…");
  });
}

$("start").addEventListener("click", startMicrophone);
$("stop").addEventListener("click", stopMicrophone);
$("file").addEventListener("change", (event) => {
  const file = event.target.files[0];
  if (file) streamFile(file);
  event.target.value = "";
});
