"""Rank-0 experiment tracking (issue 17): TensorBoard events and an offline Weights & Biases run, written at log steps."""
import json

import pytest

from dptoolkit.config import for_store
from dptoolkit.report import read_log
from dptoolkit.train import train


def test_tensorboard_and_wandb_offline(merged, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard"); pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = for_store(merged, ["training.max_steps=20", "training.log_every=5", "training.checkpoint_every=10",
                             "logging.tensorboard=true", "logging.wandb.enable=true", "logging.wandb.mode=offline",
                             "logging.wandb.project=dpt-test"], name="test")
    run = train(cfg, nprocs=2, run_dir=tmp_path / "run", progress=False).run_dir
    log = read_log(run)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    files = list(run.glob("events.out.tfevents.*"))
    assert len(files) == 1                                                   # rank 0 only, in the run folder itself
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    mux = EventMultiplexer().AddRunsFromDirectory(str(tmp_path))            # `tensorboard --logdir` over the runs' folder
    assert list(mux.Runs()) == ["run"]                                      # the run is listed by its folder's name
    acc = EventAccumulator(str(run)); acc.Reload()
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == log["step"].tolist() == [5, 10, 15, 20]  # every log step
    assert [round(e.value, 5) for e in loss] == [round(v, 5) for v in log["loss"]]
    assert {"train/lr", "train/grad_norm", "perf/samples_per_s", "perf/data_share"} <= set(acc.Tags()["scalars"])
    res = json.loads((run / "result.json").read_text())                    # the end-of-run EMA validation too
    assert [(e.step, round(e.value, 5)) for e in acc.Scalars("val/loss_ema")] == [(20, round(res["val_loss_ema"], 5))]
    # resume: the replayed steps are purged, the new ones appended
    train(cfg, nprocs=1, run_dir=run, resume=True, progress=False, overrides=["training.max_steps=30", "logging.wandb.enable=false"])
    acc = EventAccumulator(str(run)); acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [5, 10, 15, 20, 25, 30]
    # W&B, offline: one run folder inside the run folder; its transaction log holds a history record per log step
    # with the logged loss, the resolved config and the final summary
    wb = list((run / "wandb").glob("offline-run-*"))
    assert len(wb) == 1, wb
    recs = _wandb_records(next(wb[0].glob("run-*.wandb")))
    key = lambda item: item.key or "/".join(item.nested_key)
    hist = [{key(i): json.loads(i.value_json) for i in r.history.item} for r in recs if r.WhichOneof("record_type") == "history"]
    assert [h["_step"] for h in hist] == [5, 10, 15, 20]
    assert [round(h["train/loss"], 5) for h in hist] == [round(v, 5) for v in log["loss"].iloc[:4]]
    conf = next(r.run.config for r in recs if r.WhichOneof("record_type") == "run")
    logging = json.loads(next(i.value_json for i in conf.update if i.key == "logging"))
    assert logging.get("value", logging)["wandb"]["project"] == "dpt-test"
    summ = {key(i): json.loads(i.value_json) for r in recs if r.WhichOneof("record_type") == "summary" for i in r.summary.update}
    assert summ["steps"] == 20 and summ["final_loss"] == pytest.approx(log["loss"].iloc[3], rel=1e-6)


def _wandb_records(path):
    "The protobuf records of a W&B transaction log (.wandb: a LevelDB-style log of 32 KiB blocks after a 7-byte header)."
    import struct
    from wandb.proto import wandb_internal_pb2 as pb
    raw, pos, out, buf = path.read_bytes(), 7, [], b""
    assert raw[:4] == b":W&B"
    while pos + 7 <= len(raw):
        if 32768 - pos % 32768 < 7: pos += 32768 - pos % 32768; continue
        _, n, kind = struct.unpack("<IHB", raw[pos:pos + 7]); data = raw[pos + 7:pos + 7 + n]; pos += 7 + n
        if kind == 0 and n == 0: break
        if kind in (1, 2): buf = data          # full / first fragment
        else: buf += data                      # middle / last fragment
        if kind in (1, 4):
            r = pb.Record(); r.ParseFromString(buf); out.append(r)
    return out
