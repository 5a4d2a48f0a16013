"""The first launches decoded in the pipeline's own process while its decode processes come up
(detaug/runtime/gpu/early_decode.py): which decoder a request goes to (CPU, a stand-in service
and decoder), and on the GPU: the same batches with it on and off, on the launches it decoded
and on every later one, the decoded pixels themselves, random access and resume."""
import threading

import numpy as np
import pytest

from detaug.runtime.gpu import early_decode
from detaug.runtime.gpu.early_decode import MAX_IN_FLIGHT, EarlyDecoder


class _Service:
    def __init__(self):
        self.ready = False

    def settled(self):
        return self.ready


def _made(decoder=object()):
    """An EarlyDecoder whose decoder is ``decoder`` (None: its making failed), no thread."""
    e = EarlyDecoder(0, start=False)
    e.decoder, e.made = decoder, True
    return e


def test_requests_go_here_until_the_processes_are_ready_then_there_for_good():
    svc, e = _Service(), _made()
    assert [e.take(svc) for _ in range(MAX_IN_FLIGHT)] == [True] * MAX_IN_FLIGHT
    e._pending = 0  # (their decode calls ended)
    e._release_room()  # one request's lease retired: room for one more
    assert e.take(svc) is True
    e._pending = 0
    svc.ready = True
    assert e.take(svc) is False
    assert e.taken_over and e.decoder is None  # dropped: no request was between take and decode
    svc.ready = False  # (never: once taken over, always the processes)
    assert e.take(svc) is False


def test_a_decoder_that_could_not_be_made_sends_everything_to_the_processes():
    assert _made(None).take(_Service()) is False


def test_the_decoder_stays_while_a_request_it_took_is_decoding():
    svc, e = _Service(), _made()
    assert e.take(svc) is True  # a request between take() and its decode
    svc.ready = True
    assert e.take(svc) is False
    assert e.decoder is not None  # still needed by the request in hand
    with e._cond:
        e._pending -= 1
    e._release_room()
    e.close()
    assert e.decoder is None


def test_a_full_decoder_sends_the_next_request_to_the_processes():
    """With MAX_IN_FLIGHT requests holding buffers, the next one does not wait for room (the
    launches holding it may wait for it in turn, or be cancelled): it goes to the processes."""
    svc, e = _Service(), _made()
    for _ in range(MAX_IN_FLIGHT):
        assert e.take(svc)
    assert e.take(svc) is False
    assert not e.taken_over  # (the processes are not ready: the next request with room comes here)
    e._release_room()
    assert e.take(svc) is True


def test_requests_waiting_for_the_decoder_are_decided_in_launch_order():
    """Requests of launches 3, 1, 2, 0 wait for the decoder; once it is made, launches 0 and 1
    are decoded here and 2 and 3 go to the processes, whatever order they came in."""
    svc, e = _Service(), EarlyDecoder(0, start=False)
    got, threads = {}, []
    for k in (3, 1, 2, 0):
        t = threading.Thread(target=lambda k=k: got.__setitem__(k, e.take(svc, (0, k))))
        t.start()
        threads.append(t)
    while True:  # all four waiting (no sleep: the condition's own state)
        with e._cond:
            if len(e._waiting) == 4:
                e.decoder, e.made = object(), True
                e._cond.notify_all()
                break
    for t in threads:
        t.join(10)
    assert got == {0: True, 1: True, 2: False, 3: False}


def test_waits_for_the_decoder_being_made():
    svc, e = _Service(), EarlyDecoder(0, start=False)
    got = []
    t = threading.Thread(target=lambda: got.append(e.take(svc)))
    t.start()
    t.join(0.05)
    assert t.is_alive()
    with e._cond:
        e.decoder, e.made = object(), True
        e._cond.notify_all()
    t.join(10)
    assert got == [True]


def test_switch(monkeypatch):
    assert early_decode.enabled()
    monkeypatch.setenv("DETAUG_EARLY_DECODE", "0")
    assert not early_decode.enabled()


# ---- GPU -----------------------------------------------------------------------------------------
def _mixed_pipe(decoded_only=False, seed=3, batch_size=4):
    import detaug
    from detaug import fn

    from helpers import VOC

    pipe = detaug.Pipeline(batch_size=batch_size, num_threads=2, seed=seed, device_id=0)
    with pipe:
        enc, boxes = fn.readers.voc(root=VOC, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        if decoded_only:  # the decoded pixels themselves
            pipe.set_outputs(img, boxes)
            return pipe
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.resize(img, boxes, size=(64, 80))
        pipe.set_outputs(img, fn.pad_boxes(boxes, max_boxes=16))
    return pipe


def _host(batch):
    out = []
    for v in batch:
        data = getattr(v, "data", v)
        if isinstance(data, list):  # ragged images
            out.extend(a.get() for a in data)
        elif hasattr(v, "boxes"):
            out.extend(a.get() if hasattr(a, "get") else np.asarray(a) for a in (v.boxes, v.labels))
        elif hasattr(v, "items"):
            out.extend(a.get() if hasattr(a, "get") else np.asarray(a) for _, a in sorted(v.items()))
        else:
            out.append(data.get() if hasattr(data, "get") else np.asarray(data))
    return out


def _assert_same(a, b):
    ha, hb = _host(a), _host(b)
    assert len(ha) == len(hb)
    for x, y in zip(ha, hb):
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


@pytest.fixture
def held_processes(monkeypatch):
    """The decode processes counted as not ready until ``gate.set()`` (they connect as usual):
    the first launches are decoded here for certain (in a real start they are whenever this
    process's decoder is warm first)."""
    from detaug.runtime.gpu import decode_proc

    gate = threading.Event()
    orig = decode_proc.DecodeService.settled
    monkeypatch.setattr(decode_proc.DecodeService, "settled", lambda self: gate.is_set() and orig(self))
    yield gate
    gate.set()


def _batches(pipe, n, gate=None, release_after=None):
    out = []
    try:
        for k in range(n):
            if gate is not None and k == release_after:
                gate.set()
            out.append(pipe.run())
        early = pipe._decode_service.early
        return out, (None if early is None else (early.served, early.decoder))
    finally:
        pipe.close()


@pytest.mark.gpu
@pytest.mark.parametrize("decoded_only", [False, True], ids=["warped", "decoded"])
def test_same_batches_with_the_first_launches_decoded_here(monkeypatch, held_processes, decoded_only):
    """The first launches decoded in this process (the processes held back for 3 batches), then
    the processes: every batch equals those of a pipeline whose processes decode all (the
    decoded pixels themselves too: same decoder settings, same call, same packed layout)."""
    pytest.importorskip("nvidia.nvimgcodec")
    got, (served, decoder) = _batches(_mixed_pipe(decoded_only), 10, held_processes, 3)
    assert served >= 1  # (the launches of the first 3 batches)
    assert decoder is None  # dropped once the processes took over
    monkeypatch.setenv("DETAUG_EARLY_DECODE", "0")
    want, early = _batches(_mixed_pipe(decoded_only), 10)
    assert early is None
    for a, b in zip(got, want):
        _assert_same(a, b)


@pytest.mark.gpu
def test_random_access_and_resume_while_the_first_launches_are_decoded_here(monkeypatch, held_processes):
    pytest.importorskip("nvidia.nvimgcodec")
    monkeypatch.setenv("DETAUG_EARLY_DECODE", "0")
    want, _ = _batches(_mixed_pipe(), 8)
    monkeypatch.delenv("DETAUG_EARLY_DECODE")
    pipe = _mixed_pipe()
    try:
        _assert_same(pipe.run_batch(5), want[5])  # random access, decoded here
        for k in range(3):
            _assert_same(pipe.run(), want[k])
        state = pipe.state_dict()
        assert pipe._decode_service.early.served >= 1
    finally:
        pipe.close()
    resumed = _mixed_pipe()
    try:
        resumed.load_state_dict(state)
        for k in range(3, 6):
            if k == 4:
                held_processes.set()  # the processes take over mid-way
            _assert_same(resumed.run(), want[k])
    finally:
        resumed.close()


@pytest.mark.gpu
def test_processes_that_cannot_start_still_fail_clearly(monkeypatch):
    """A decode process that cannot start is the same clear error with the decoder here (which
    serves no request once the processes are known to have failed)."""
    pytest.importorskip("nvidia.nvimgcodec")
    from detaug.runtime.gpu import decode_proc

    def broken(self):
        raise RuntimeError("the GPU decode worker process did not start (test); "
                           "Pipeline(decode_processes=0) decodes in the pipeline's own threads instead")

    pipe = _mixed_pipe()
    monkeypatch.setattr(decode_proc._Worker, "connect", broken)
    try:
        with pytest.raises(RuntimeError, match="did not start.*decode_processes=0"):
            for _ in range(40):
                pipe.run()
    finally:
        pipe.close()
