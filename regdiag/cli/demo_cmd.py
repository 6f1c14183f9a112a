"""`regdiag demo`: a whole diagnosis on this machine (regdiag.demo), rendered stage by stage."""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text

from regdiag.cli.common import (
    JsonOpt,
    PlainProgress,
    bounded,
    console,
    err_console,
    format_opt,
    pick_format,
    show,
)
from regdiag.report.layout import pack

HELP = (
    "Run a whole diagnosis here, with no GPU and nothing to set up: two environments that differ in "
    "four factors (three NCCL variables, harmless on CPU, and REGDIAG_PROBE_SLOW=verify:MS, a hook of "
    "the probe that adds real busy work to the verify phase) are probed with the tiny CPU preset of "
    "spec-decode, compared, bisected and explained. One to two minutes on 2 cores. The runs "
    "and the bisect journal are kept under $REGDIAG_HOME/demo/ with the commands to redo each step."
)


def demo(
    launches: int = typer.Option(
        3, "--launches", "-L", callback=bounded(2, 1000), help="Probe launches per environment (default 3)."
    ),
    slow_ms: float = typer.Option(
        20.0,
        "--slow-ms",
        min=0.0,
        max=1000.0,  # inf failed the probe after a minute of work; 1e300 never ended
        help="Busy work the culprit adds to verify, in ms (default 20, at most 1000).",
    ),
    json_out: bool = JsonOpt,
    fmt: str | None = format_opt("demo"),
) -> None:
    from regdiag.demo import run_demo

    out_fmt = pick_format("demo", fmt, json_out)
    view = DemoView(out_fmt != "terminal")
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
    show("demo", out_fmt, result)
    if result["bisect"]["verdict"] != "CULPRIT":
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    app.command("demo", help=HELP)(demo)


class DemoView:
    """The demo as it goes: a heading per step (on stderr when stdout has the JSON or markdown), each
    step's result shown as its own command shows it (only in the terminal format), and what runs now
    on a status line (a terminal) or in plain progress lines (a log).

    On a terminal the status line is taken down while anything else is printed and put back after,
    so a heading or a bisect decision starts on a line of its own, never behind the spinner's text
    (and stdout stays stdout: a live status would route it to stderr). In a log the progress lines
    (stderr) fall between the steps, never inside a step's output."""

    def __init__(self, quiet: bool) -> None:
        self.json_out = quiet  # stdout is the final result alone (JSON, markdown)
        self.out = err_console if quiet else console
        self.status = err_console.status("starting") if err_console.is_terminal else None
        self.running = False
        self._resume()
        self.plain = PlainProgress("demo")

    def _resume(self) -> None:
        if self.status is not None and not self.running:
            self.status.start()
            self.running = True

    def _pause(self) -> None:
        if self.status is not None and self.running:
            self.status.stop()
            self.running = False

    def say(self, *lines: Any, **kwargs: Any) -> None:
        self._pause()
        for ln in lines:
            self.out.print(ln, **kwargs)
        self._resume()

    def note(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)
        self.plain.step(text)

    def stop(self) -> None:
        self._pause()
        self.status = None

    def on_stage(self, stage: str, data: dict[str, Any]) -> None:
        json_out = self.json_out
        if stage == "probe":
            env = [Text(f"{k}={v}", style="dim") for k, v in data["env"].items()]
            self.say(
                "",
                f"[bold]probe spec-decode --preset tiny[/]: the {data['side']} environment",
                *pack(env, self.out.width, "  "),
            )
            self.note(f"probing the {data['side']} environment")
        elif stage == "probed":
            self.say(f"[dim]  run record: {data['path']}[/]", soft_wrap=True)
        elif stage == "compare":
            self.say("", "[bold]compare good bad[/]: is it real, and where?")
        elif stage == "compared" and not json_out:
            self._show("compare", data["comparison"], ("good", "bad"))
        elif stage == "bisect":
            self.say("", f"[bold]bisect --metric {data['metric']}[/]: which difference costs the time?")
            self.note("bisecting")
        elif stage == "bisected" and not json_out:
            self._show("bisect", data["report"])
        elif stage == "explain":
            self.say("", "[bold]explain bad[/]: regression or physics?")
        elif stage == "explained" and not json_out:
            self._show("explain", data["explanation"])

    def _show(self, what: str, data: Any, labels: tuple[str, str] = ("", "")) -> None:
        self._pause()
        show(what, "terminal", data, labels, to=self.out)
        self._resume()

    def on_probe(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "launch_start":
            self.note(f"probe launch {data['index'] + 1} of {data['of']}")

    def on_bisect(self, ev: dict[str, Any]) -> None:
        if ev.get("event") == "launch":
            self.note(f"bisect: {ev['label']} launch {ev['index'] + 1}")
        elif ev.get("event") == "decision":
            theta = ev.get("theta")
            tail = f" (theta {theta:.2f})" if isinstance(theta, (int, float)) else ""
            self.say(f"[dim]  {ev['what']}: {ev['verdict']}{tail}[/]")
