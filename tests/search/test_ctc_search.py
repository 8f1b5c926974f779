import gc
import itertools
import math
from typing import Dict, List, Tuple

import pytest
import torch

from wenet_lite.search.ctc_search import (
    StreamingGreedySearch,
    StreamingPrefixBeamSearch,
    _Node,
    ctc_greedy_search,
    ctc_prefix_beam_search,
    frames_to_seconds,
    greedy_chunks,
    penalize_blank,
)


def _random_log_probs(seed: int, num_frames: int, vocab: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_frames, vocab, generator=gen).mul(2).log_softmax(-1)  # (T, V)


def _peaked_log_probs(seed: int, num_frames: int, vocab: int, min_peak: float) -> torch.Tensor:
    """Each frame's argmax (random, blank included) has probability in [min_peak, 1)."""
    gen = torch.Generator().manual_seed(seed)
    frames = torch.arange(num_frames)
    ids = torch.randint(0, vocab, (num_frames,), generator=gen)
    peak = min_peak + (0.99 - min_peak) * torch.rand(num_frames, generator=gen)
    rest = torch.rand(num_frames, vocab, generator=gen) + 1e-3
    rest[frames, ids] = 0
    probs = rest / rest.sum(-1, keepdim=True) * (1 - peak[:, None])
    probs[frames, ids] = peak
    return probs.log()  # (T, V)


def _greedy(log_probs: torch.Tensor):
    return ctc_greedy_search(log_probs[None], torch.tensor([log_probs.size(0)]))[0]


def _brute_force(log_probs: torch.Tensor) -> Dict[Tuple[int, ...], float]:
    """Oracle: probability of every label sequence, summed over all V**T alignments."""
    probs = log_probs.double().exp().tolist()
    totals: Dict[Tuple[int, ...], float] = {}
    for path in itertools.product(range(len(probs[0])), repeat=len(probs)):
        kept = [tok for i, tok in enumerate(path) if tok != 0 and (i == 0 or tok != path[i - 1])]
        prob = math.prod(p[k] for p, k in zip(probs, path))
        totals[tuple(kept)] = totals.get(tuple(kept), 0.0) + prob
    return totals


def _split(num_frames: int, gen: torch.Generator) -> List[int]:
    """Random chunk sizes (some zero-length) summing to num_frames."""
    cuts = sorted(torch.randint(0, num_frames + 1, (4,), generator=gen).tolist())
    bounds = [0, *cuts, num_frames]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def test_hand_checked_two_frames():
    # V = 2 (blank, 'a'); p(a) = 0.6 then 0.3.
    log_probs = torch.tensor([[0.4, 0.6], [0.7, 0.3]]).log()
    hyps = ctc_prefix_beam_search(log_probs, beam_size=2, nbest=2)
    # P('a') = p(a,a) + p(a,b) + p(b,a) = .18 + .42 + .12; P('') = p(b,b) = .28
    assert [h.tokens for h in hyps] == [[1], []]
    assert math.exp(hyps[0].score) == pytest.approx(0.72, abs=1e-6)
    assert math.exp(hyps[1].score) == pytest.approx(0.28, abs=1e-6)


def test_hand_checked_repeats_three_frames():
    # V = 2 (blank, 'a'); p(a) = .6, .3, .8. 'a a' needs a blank between the two a's.
    log_probs = torch.tensor([[0.4, 0.6], [0.7, 0.3], [0.2, 0.8]]).log()
    hyps = ctc_prefix_beam_search(log_probs, beam_size=3, nbest=3)
    # 'a':  aaa .144 + aab .036 + abb .084 + baa .096 + bab .024 + bba .224 = .608
    # 'aa': aba .6 * .7 * .8 = .336;  '': bbb .4 * .7 * .2 = .056
    assert [h.tokens for h in hyps] == [[1], [1, 1], []]
    probs = [math.exp(h.score) for h in hyps]
    assert probs == pytest.approx([0.608, 0.336, 0.056], abs=1e-6)
    # The best single alignment of 'a' is bba (.224): 'a' is emitted at frame 2, peak .8.
    assert hyps[0].timestamps == [2]
    assert hyps[0].confidence == pytest.approx(0.8)
    assert hyps[1].timestamps == [0, 2]
    assert hyps[1].confidence == pytest.approx((0.6 + 0.8) / 2)
    assert hyps[1].peaks == pytest.approx([0.6, 0.8])  # each token's own peak
    assert hyps[0].peaks == pytest.approx([0.8]) and hyps[2].peaks == []
    assert hyps[2].confidence == pytest.approx(0.056 ** (1 / 3))
    # Greedy follows a, b, a and outputs 'a a': the most probable path, not the likeliest text.
    assert _greedy(log_probs).tokens == [1, 1]


@pytest.mark.parametrize("seed", range(3))
def test_unpruned_search_matches_brute_force(seed):
    log_probs = _random_log_probs(seed, num_frames=4, vocab=3)
    exact = _brute_force(log_probs)
    # 31 possible prefixes for T=4, V=3: a beam of 64 never prunes, so the scores are exact.
    hyps = ctc_prefix_beam_search(log_probs, beam_size=64, nbest=len(exact), token_topk=3)
    assert {tuple(h.tokens): math.exp(h.score) for h in hyps} == pytest.approx(exact, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_beam_one_is_greedy_with_default_pruning(seed):
    # Pruning to the top beam_size tokens leaves one candidate per frame: beam 1 then follows the
    # greedy path exactly, whatever the distribution.
    log_probs = _random_log_probs(seed, num_frames=60, vocab=5)
    beam, greedy = ctc_prefix_beam_search(log_probs, beam_size=1)[0], _greedy(log_probs)
    assert beam.tokens == greedy.tokens
    assert beam.timestamps == greedy.timestamps
    assert beam.score == pytest.approx(greedy.score, abs=1e-9)
    assert beam.confidence == pytest.approx(greedy.confidence)


@pytest.mark.parametrize("seed", range(4))
def test_unpruned_beam_one_is_greedy_on_peaked_frames(seed):
    # Without pruning a single beam compares summed prefix probabilities; it provably keeps the
    # greedy prefix when every frame's argmax has probability >= 1/sqrt(2). We use >= 0.75.
    log_probs = _peaked_log_probs(seed, num_frames=60, vocab=4, min_peak=0.75)
    beam = ctc_prefix_beam_search(log_probs, beam_size=1, token_topk=4)[0]
    greedy = _greedy(log_probs)
    assert beam.tokens == greedy.tokens
    assert beam.timestamps == greedy.timestamps


def test_unpruned_beam_one_differs_from_greedy_in_general():
    # Frame 2: 'a' stays via blank or repeat (.6*.3 + .6*.3 = .36) beats 'a b' (.6*.4 = .24).
    log_probs = torch.tensor([[0.39, 0.6, 0.01], [0.3, 0.3, 0.4]]).log()
    assert _greedy(log_probs).tokens == [1, 2]
    assert ctc_prefix_beam_search(log_probs, beam_size=1, token_topk=3)[0].tokens == [1]


def test_nbest_is_sorted_distinct_and_extends_one_best():
    log_probs = _random_log_probs(7, num_frames=40, vocab=6)
    hyps = ctc_prefix_beam_search(log_probs, beam_size=8, nbest=5)
    scores = [h.score for h in hyps]
    assert len(hyps) == 5
    assert scores == sorted(scores, reverse=True)
    assert len({tuple(h.tokens) for h in hyps}) == 5
    assert hyps[0] == ctc_prefix_beam_search(log_probs, beam_size=8)[0]


def test_timestamps_of_peaked_sequence():
    # Per-frame winners; the run of 5s at frames 5-7 has peak .95, the second 5 follows a blank.
    winners = [0, 0, 3, 3, 0, 5, 5, 5, 0, 0, 5, 0, 7, 7]
    peaks = [0.9, 0.9, 0.8, 0.9, 0.9, 0.7, 0.95, 0.9, 0.9, 0.9, 0.85, 0.9, 0.9, 0.6]
    vocab = 8
    probs = torch.empty(len(winners), vocab)
    for t, (tok, peak) in enumerate(zip(winners, peaks)):
        probs[t] = (1 - peak) / (vocab - 1)
        probs[t, tok] = peak
    log_probs = probs.log()
    expected_tokens, expected_frames = [3, 5, 5, 7], [2, 5, 10, 12]
    greedy = _greedy(log_probs)
    assert greedy.tokens == expected_tokens
    assert greedy.timestamps == expected_frames
    assert greedy.confidence == pytest.approx((0.9 + 0.95 + 0.85 + 0.9) / 4)
    assert greedy.peaks == pytest.approx([0.9, 0.95, 0.85, 0.9])
    assert greedy.score == pytest.approx(sum(math.log(p) for p in peaks))
    beam = ctc_prefix_beam_search(log_probs, beam_size=4)[0]
    assert beam.tokens == expected_tokens
    assert beam.timestamps == expected_frames
    assert frames_to_seconds(beam.timestamps, subsampling_rate=4) == pytest.approx(
        [0.08, 0.2, 0.4, 0.48]
    )


def test_greedy_batch_ignores_padding():
    a, b = _random_log_probs(1, 30, 5), _random_log_probs(2, 18, 5)
    batch = torch.stack([a, torch.cat([b, _random_log_probs(3, 12, 5)])])  # (2, 30, 5)
    hyps = ctc_greedy_search(batch, torch.tensor([30, 18]))
    assert hyps == [_greedy(a), _greedy(b)]


@pytest.mark.parametrize("seed", range(5))
def test_streaming_greedy_equals_one_shot(seed):
    # V = 3 makes runs that cross chunk boundaries common.
    log_probs = _random_log_probs(seed, num_frames=50, vocab=3)
    search = StreamingGreedySearch()
    for chunk in torch.split(log_probs, _split(50, torch.Generator().manual_seed(seed))):
        (streamed,) = search.accept(chunk)  # a list, as the beam's n-best
    expected = _greedy(log_probs)
    assert streamed.tokens == expected.tokens
    assert streamed.timestamps == expected.timestamps
    assert streamed.score == pytest.approx(expected.score, abs=1e-9)
    assert streamed.confidence == pytest.approx(expected.confidence)


_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _batched_greedy(
    streams: List[torch.Tensor], chunk: int, device: str, follow: bool = True
) -> List[StreamingGreedySearch]:
    """Streams of (T, V) log-probs decoded C frames a step by ``greedy_chunks``, each step
    batching the streams that still have frames (a last chunk is shorter, zero-padded);
    ``follow=False`` hides each stream's last argmax from the next step (a broken search)."""
    searches = [StreamingGreedySearch() for _ in streams]
    step = 0
    while True:
        live = [i for i, lp in enumerate(streams) if step * chunk < lp.size(0)]
        if not live:
            return searches
        batch = torch.zeros(len(live), chunk, streams[0].size(1), dtype=streams[0].dtype)
        lens = []
        for row, i in enumerate(live):
            part = streams[i][step * chunk : (step + 1) * chunk]
            batch[row, : part.size(0)] = part
            lens.append(part.size(0))
        last = [searches[i].last_id if follow else 0 for i in live]
        paths = greedy_chunks(
            batch.to(device), torch.tensor(lens), torch.tensor(last),
            torch.tensor([searches[i].score for i in live], dtype=torch.float64),
        )  # fmt: skip
        for i, path in zip(live, paths):
            searches[i].accept_path(path)
        step += 1


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_greedy_on_the_device_equals_the_host_search(device, dtype):
    # V = 3 makes runs that cross chunk boundaries common; the streams have different lengths,
    # so the batch shrinks as they end, and every stream's last chunk is partial.
    lengths = [37, 50, 9, 64, 23, 41]
    streams = [_random_log_probs(seed, n, 3).to(dtype) for seed, n in enumerate(lengths)]
    batched = _batched_greedy(streams, chunk=8, device=device)
    for lp, got in zip(streams, batched):
        host = StreamingGreedySearch()
        for part in torch.split(lp, 8):
            host.accept(part)
        want, have = host.best(), got.best()
        assert have.tokens == want.tokens and have.timestamps == want.timestamps
        assert have.peaks == want.peaks  # the same float32 (or bf16) values
        assert have.score == want.score and have.confidence == want.confidence
        assert got.last_id == host.last_id and got.num_frames == host.num_frames
    # Negative control: a search that forgets the last chunk's argmax emits a token twice.
    broken = _batched_greedy(streams, chunk=8, device=device, follow=False)
    assert any(b.best().tokens != g.best().tokens for b, g in zip(broken, batched))


@pytest.mark.parametrize("seed", range(3))
def test_streaming_beam_equals_one_shot(seed):
    log_probs = _random_log_probs(seed, num_frames=50, vocab=6)
    search = StreamingPrefixBeamSearch(beam_size=4, nbest=3)
    for chunk in torch.split(log_probs, _split(50, torch.Generator().manual_seed(seed))):
        streamed = search.accept(chunk)
    expected = ctc_prefix_beam_search(log_probs, beam_size=4, nbest=3)
    assert [h.tokens for h in streamed] == [h.tokens for h in expected]
    assert [h.timestamps for h in streamed] == [h.timestamps for h in expected]
    assert [h.score for h in streamed] == pytest.approx([h.score for h in expected], abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_token_min_logp_equals_search_without_the_pruned_tokens(seed):
    # Oracle: the unpruned search over log-probs in which every token below the threshold
    # (except each frame's best) is impossible. Peaked frames leave 1-3 tokens per frame.
    log_probs = _peaked_log_probs(seed, num_frames=60, vocab=8, min_peak=0.6)
    floor = math.log(0.08)
    best = log_probs.argmax(-1)  # (T,)
    impossible = log_probs < floor
    impossible[torch.arange(60), best] = False
    masked = log_probs.masked_fill(impossible, float("-inf"))  # (T, V)
    assert 0 < impossible.sum() < impossible.numel()
    pruned = ctc_prefix_beam_search(log_probs, beam_size=5, nbest=3, token_min_logp=floor)
    oracle = ctc_prefix_beam_search(masked, beam_size=5, nbest=3)
    assert [h.tokens for h in pruned] == [h.tokens for h in oracle]
    assert [h.timestamps for h in pruned] == [h.timestamps for h in oracle]
    assert [h.score for h in pruned] == pytest.approx([h.score for h in oracle], abs=1e-9)
    unpruned = ctc_prefix_beam_search(log_probs, beam_size=5, nbest=3)
    assert [h.score for h in pruned] != pytest.approx([h.score for h in unpruned], abs=1e-9)
    # The best token always stays: a threshold above every log-prob is greedy search.
    top_only = ctc_prefix_beam_search(log_probs, beam_size=5, token_min_logp=1.0)[0]
    assert top_only.tokens == _greedy(log_probs).tokens


def test_blank_penalty_is_a_lower_blank_logit():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 40, 5, generator=gen)  # (B, T, V)
    log_probs = logits.log_softmax(-1)
    assert penalize_blank(log_probs, 0.0) is log_probs
    lowered = logits.clone()
    lowered[..., 0] -= 1.5
    penalized = penalize_blank(log_probs, 1.5)
    torch.testing.assert_close(penalized, lowered.log_softmax(-1))
    assert torch.equal(log_probs, logits.log_softmax(-1)), "the input is left as it was"
    blanks = [(x.argmax(-1) == 0).sum().item() for x in (log_probs, penalized)]
    assert blanks[1] < blanks[0]


def test_empty_input_and_bad_arguments():
    empty = torch.zeros(0, 4)
    assert ctc_prefix_beam_search(empty, beam_size=3)[0].tokens == []
    assert _greedy(empty).confidence == 1.0
    with pytest.raises(ValueError, match="beam_size"):
        ctc_prefix_beam_search(empty, beam_size=0)
    with pytest.raises(ValueError, match="nbest"):
        ctc_prefix_beam_search(empty, beam_size=2, nbest=3)
    with pytest.raises(ValueError, match=r"\(1, 0, 4\)"):
        ctc_prefix_beam_search(empty[None], beam_size=2)


def test_a_long_stream_keeps_a_small_trie_and_the_same_result():
    """The beam's prefix trie holds only the beam's prefixes and what grew from them (nodes
    know their children, not their parents): however long the stream, the live trie stays
    small (memory stays flat), and the result is that of the search over the whole input."""
    log_probs = _peaked_log_probs(7, num_frames=3000, vocab=8, min_peak=0.5)
    search = StreamingPrefixBeamSearch(beam_size=6, nbest=3)
    largest = 0
    for i, chunk in enumerate(torch.split(log_probs, 16)):
        streamed = search.accept(chunk)
        if i % 20 == 19:
            gc.collect()
            largest = max(largest, sum(type(o) is _Node for o in gc.get_objects()))
    assert streamed[0].num_tokens > 500
    assert largest < 100, largest
    expected = ctc_prefix_beam_search(log_probs, beam_size=6, nbest=3)
    assert [h.tokens for h in streamed] == [h.tokens for h in expected]
    assert [h.timestamps for h in streamed] == [h.timestamps for h in expected]
    assert [h.score for h in streamed] == pytest.approx([h.score for h in expected], abs=1e-6)
