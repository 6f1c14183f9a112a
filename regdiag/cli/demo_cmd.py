"""`regdiag demo`: a whole diagnosis on this machine (regdiag.demo), rendered stage by stage."""

from __future__ import annotations

from typing import Any

import typer

from regdiag.cli.common import JsonOpt, PlainProgress, console, err_console, print_json, show
from regdiag.records import tagged

HELP = (
    "Run a whole diagnosis here, with no GPU and nothing to set up: two environments that differ in "
    "four factors (three NCCL variables, harmless on CPU, and REGDIAG_PROBE_SLOW=verify:MS, a hook of "
    "the probe that adds real busy work to the verify phase) are probed with the tiny CPU preset of "
    "spec-decode, compared, bisected and explained. One to two minutes on 2 cores. The runs "
    "and the bisect journal are kept under $REGDIAG_HOME/demo/ with the commands to redo each step."
)


def demo(
    launches: int = typer.Option(
        3, "--launches", "-L", min=2, help="Probe launches per environment (default 3)."
    ),
    slow_ms: float = typer.Option(
        20.0,
        "--slow-ms",
        min=0.0,
        max=1000.0,  # inf failed the probe after a minute of work; 1e300 never ended
        help="Busy work the culprit adds to verify, in ms (default 20, at most 1000).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    from regdiag.demo import run_demo

    view = DemoView(json_out)
    try:
        result = run_demo(
            view.on_stage,
            launches=launches,
            slow_ms=slow_ms,
            on_probe_event=view.on_probe,
            on_bisect_event=view.on_bisect,
        )
    finally:
        view.stop()
    if json_out:
        print_json(
            tagged(
                "demo",
                {
                    "workdir": result["workdir"],
                    "runs": result["runs"],
                    "compare": result["comparison"].to_dict(),
                    "bisect": result["bisect"],
                    "explain": result["explanation"].to_dict(),
                    "seconds": round(result["seconds"], 1),
                    "commands": result["commands"],
                },
            )
        )
    else:
        _print_found(result)
    if result["bisect"]["verdict"] != "CULPRIT":
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    app.command("demo", help=HELP)(demo)


class DemoView:
    """The demo as it goes: a heading per step (on stderr under --json), each step's result shown as its
    own command shows it (not under --json), and what runs now on a status line (a terminal) or in
    plain progress lines (a log)."""

    def __init__(self, json_out: bool) -> None:
        self.json_out = json_out
        self.out = err_console if json_out else console
        self.status = err_console.status("starting") if err_console.is_terminal else None
        if self.status is not None:
            self.status.start()
        self.plain = PlainProgress("demo")

    def note(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)
        self.plain.step(text)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()

    def on_stage(self, stage: str, data: dict[str, Any]) -> None:
        out, json_out = self.out, self.json_out
        if stage == "probe":
            env = " ".join(f"{k}={v}" for k, v in data["env"].items())
            out.print(
                f"\n[bold]probe spec-decode --preset tiny[/], {data['side']} environment: [dim]{env}[/]"
            )
            self.note(f"probing the {data['side']} environment")
        elif stage == "probed":
            out.print(f"[dim]  run record: {data['path']}[/]")
        elif stage == "compare":
            out.print("\n[bold]compare good bad[/]: is it real, and where?")
        elif stage == "compared" and not json_out:
            show("compare", "terminal", data["comparison"], ("good", "bad"), to=out)
        elif stage == "bisect":
            out.print(
                f"\n[bold]bisect --metric {data['metric']}[/]: which of the four differences costs the "
                "milliseconds?"
            )
            self.note("bisecting")
        elif stage == "bisected" and not json_out:
            show("bisect", "terminal", data["report"], to=out)
        elif stage == "explain":
            out.print("\n[bold]explain bad[/]: regression or physics?")
        elif stage == "explained" and not json_out:
            show("explain", "terminal", data["explanation"], to=out)

    def on_probe(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "launch_start":
            self.note(f"probe launch {data['index'] + 1} of {data['of']}")

    def on_bisect(self, ev: dict[str, Any]) -> None:
        if ev.get("event") == "launch":
            self.note(f"bisect: {ev['label']} launch {ev['index'] + 1}")
        elif ev.get("event") == "decision":
            theta = ev.get("theta")
            tail = f" (theta {theta:.2f})" if isinstance(theta, (int, float)) else ""
            self.out.print(f"[dim]  {ev['what']}: {ev['verdict']}{tail}[/]")


def _print_found(result: dict[str, Any]) -> None:
    """What the demo found, how long it took, and each step as a user would type it."""
    console.print(f"\n[bold]found:[/] {result['bisect']['statement']}")
    console.print(f"[dim]{result['seconds']:.0f} s in all; everything is in {result['workdir']}[/]")
    console.print("[dim]each step by hand:[/]")
    for c in result["commands"]:
        console.print(f"  {c}", soft_wrap=True, highlight=False)
