"""report.png at the end of a run: loss, validation loss, learning rate and throughput from the event log."""

from __future__ import annotations

from pathlib import Path

from trainer_core.contract import rundir
from trainer_core.contract.eventlog import read_all


def _series(events) -> dict[str, list]:
    s: dict[str, list] = {k: [] for k in ("step", "loss", "lr", "tp_step", "tp", "val_step", "val")}
    for e in events:
        if e.type == "step":
            s["step"] += e.step_series or [e.step]
            s["loss"] += e.loss_series or [e.loss]
            s["lr"] += e.lr_series or [e.lr]
            s["tp_step"].append(e.step)
            s["tp"].append(e.samples_per_s)
        elif e.type == "validation":
            s["val_step"].append(e.step)
            s["val"].append(e.loss)
    return s


def write_report(run_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on a training box
    import matplotlib.pyplot as plt

    s = _series(read_all(run_dir / rundir.EVENTS))
    fig, (ax_loss, ax_lr, ax_tp) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    losses = [(x, y) for x, y in zip(s["step"], s["loss"], strict=False) if y is not None]
    if losses:
        ax_loss.plot(*zip(*losses, strict=False), label="train", linewidth=0.8)
    if s["val"]:
        ax_loss.plot(s["val_step"], s["val"], "o-", label="validation")
    ax_loss.set_ylabel("loss")
    ax_loss.legend(loc="upper right")
    ax_lr.plot(s["step"], s["lr"])
    ax_lr.set_ylabel("learning rate")
    ax_tp.plot(s["tp_step"], s["tp"])
    ax_tp.set_ylabel("samples/s")
    ax_tp.set_xlabel("step")
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    target = run_dir / rundir.REPORT
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target
