"""The progress line: rewritten in place on a terminal, plain lines every few seconds in a log;
both with step/total, samples per second and the time left."""

import io

from ember.train.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def ticking(step):
    t = [0.0]

    def clock():
        t[0] += step
        return t[0]

    return clock


def test_a_terminal_gets_one_line_rewritten_in_place():
    out = Terminal()
    bar = Progress(10, "epoch 1/2", batch_size=50, stream=out, clock=ticking(0.5))
    bar.update(0)
    for _ in range(10):
        bar.update(1, loss=0.5)
    bar.close()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, ended when the epoch is
    frames = text.rstrip("\n").split("\r")[1:]
    assert len(frames) == 10
    assert frames[0].startswith("epoch 1/2: 1/10 (10%) 100 samples/s, ETA 0:00:04  loss=0.5")
    assert frames[-1].startswith("epoch 1/2: 10/10 (100%) 100 samples/s, 0:00:05")
    assert all(len(f) >= len(frames[i]) for i, f in enumerate(frames[1:])), "a shorter frame must cover the longer"


def test_a_log_gets_a_plain_line_every_few_seconds():
    out = io.StringIO()
    bar = Progress(100, "epoch 1/1", batch_size=10, stream=out, clock=ticking(1.0), every_s=30)
    bar.update(0)
    for _ in range(100):
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split()[2] for line in lines] == ["30/100", "60/100", "90/100", "100/100"]
    assert lines[0] == "epoch 1/1: 30/100 (30%) 10 samples/s, ETA 0:01:10"


def test_a_resumed_epoch_counts_its_rate_from_where_it_resumed():
    out = io.StringIO()
    bar = Progress(100, "epoch 2/3", batch_size=1, stream=out, clock=ticking(1.0), every_s=0)
    bar.update(60)  # the batches done before the resume: no rate from them
    bar.update(20)
    assert out.getvalue() == "epoch 2/3: 80/100 (80%) 20 samples/s, ETA 0:00:01\n"


def test_disabled_writes_nothing():
    out = Terminal()
    bar = Progress(3, "x", enabled=False, stream=out)
    bar.update(3)
    bar.close()
    assert out.getvalue() == ""
