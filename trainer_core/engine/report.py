"""report.png at the end of a run: loss, validation loss, learning rate and throughput from
the event log, and for a voice run the last alignment picture (`sample` events of kind "image"
name it, `rundir.ALIGNMENT_VIEW`)."""

from __future__ import annotations

from pathlib import Path

from trainer_core.contract import rundir
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event, SampleEvent


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


def last_alignment(run_dir: Path, events: list[Event]) -> SampleEvent | None:
    """The newest alignment picture the log names that this run folder still holds (found by its
    step folder and name, so a moved run folder shows its own copy)."""
    for e in reversed(events):
        if (
            isinstance(e, SampleEvent)
            and e.kind == "image"
            and Path(e.path).name == rundir.ALIGNMENT_VIEW
        ):
            recorded = Path(e.path)
            here = run_dir / rundir.SAMPLES / recorded.parent.name / recorded.name
            if here.is_file():
                return e.model_copy(update={"path": str(here)})
    return None


def write_report(run_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on a training box
    import matplotlib.pyplot as plt

    events = read_all(run_dir / rundir.EVENTS)
    s = _series(events)
    alignment = last_alignment(run_dir, events)
    rows = 3 if alignment is None else 4
    fig = plt.figure(figsize=(9, 9 if alignment is None else 13))
    grid = fig.add_gridspec(rows, 1, height_ratios=[1, 1, 1, 1.6][:rows])
    ax_loss = fig.add_subplot(grid[0])
    ax_lr, ax_tp = (fig.add_subplot(grid[n], sharex=ax_loss) for n in (1, 2))
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
    if alignment is not None:
        _alignment_panel(fig.add_subplot(grid[3]), alignment)
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    target = run_dir / rundir.REPORT
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target


def _alignment_panel(axes, alignment: SampleEvent) -> None:
    """The alignment picture as written at its evaluation (its own axes,
    title and colour bar included)."""
    import matplotlib.image

    axes.imshow(matplotlib.image.imread(alignment.path))
    axes.set_axis_off()
    axes.set_title(f"last alignment (step {alignment.step})", fontsize=9)
