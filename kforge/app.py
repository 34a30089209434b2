"""The kforge app every command group hangs on: the Typer app, the consoles, the shared options, one-line errors,
and the two things every command needs from settings (the db and the evaluation settings). It imports no command
module, so command modules import it and never each other."""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer vendors click and exports neither
from typer.core import TyperCommand, TyperGroup

from evaluator.contracts import DTYPE_NAMES, EvalSettings, EvaluatorError, Limits
from evaluator.hardware import auto_device
from evaluator.languages import language_of
from evaluator.parent import leases
from evaluator.sandbox import forkserver
from kforge.settings import Settings
from reference_problems import ProblemError

if TYPE_CHECKING:  # SQLAlchemy loads in the commands that open a db, not at start-up
    from db import Database
    from evaluator.sandbox.cgroups import CompilePlan
    from judging.judge import Backend


class _OneLineUsage(TyperGroup):
    """kforge's root command. Click says a usage error (a missing argument, an unknown option or command, a bad
    value) in four lines, usage and hint before the error; here it is one line, exit 2, for every command under it."""

    def make_context(self, info_name, args, parent=None, **extra):
        with _usage_in_one_line():  # kforge's own options: `kforge --bogus`
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        with _usage_in_one_line():  # the command's name, its arguments and options, and any group under it
            return super().invoke(ctx)


@contextlib.contextmanager
def _usage_in_one_line():
    """A usage error becomes its line on stderr and the exit code click gives it (2); the help that `kforge` alone
    prints (click raises it as a usage error too) goes on as it is."""
    try:
        yield
    except NoArgsIsHelpError:
        raise
    except UsageError as exc:
        err.print(_usage_line(exc), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


def _usage_line(exc: UsageError) -> str:
    """`kforge submit: missing argument 'file' (kforge submit --help)`: the command, click's own words, where its
    usage is. Named `kforge` however it was started (`python -m kforge`), as every kforge message is; the pointer
    is left off where it would take the line past the terminal's width, and so is the command where click knows
    none (an option missing its value)."""
    said = exc.format_message().removesuffix(".")
    said = said[:1].lower() + said[1:]
    if exc.ctx is None:
        return f"kforge: {said}"
    command = "kforge" + exc.ctx.command_path.removeprefix(exc.ctx.find_root().command_path)
    line, pointer = f"{command}: {said}", f" ({command} --help)"
    return line + pointer if len(line + pointer) <= err.width else line


# plain help (click's): a two-column list that reads at 80 columns, where rich's panels squeeze each text to a sliver
app = typer.Typer(cls=_OneLineUsage, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Judge LLM-written kernels: compile, correctness, leaks, speed.")
out = Console()
err = Console(stderr=True)


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"kforge {version('kforge')}")
        except PackageNotFoundError:
            print("kforge (not installed: run from a checkout)")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                   help="print kforge's version and exit")] = False) -> None:
    """Options before any command; how this process starts evaluator children (KFORGE_FORK_SERVER)."""
    forkserver.use(Settings().fork_server)
    _say_device_waits()


class _Said(logging.Handler):
    """Shows what the evaluator says on its logger as one `kforge: ...` line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(f"kforge: {record.getMessage()}", markup=False, highlight=False, soft_wrap=True)


def _say_device_waits() -> None:
    """A wait for a device another kforge process holds is said at once: who holds it, our place in line."""
    if not any(isinstance(h, _Said) for h in leases.log.handlers):
        leases.log.addHandler(_Said())
        leases.log.setLevel(logging.INFO)


DbOpt = Annotated[Optional[str], typer.Option("--db", metavar="URL", help="SQLAlchemy URL (default: $KFORGE_DB or ~/.kforge/kforge.db)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", metavar="DEVICE", help="cpu or cuda (default: cuda if available)")]
SizeOpt = Annotated[str, typer.Option("--size", metavar="SIZE", help="full, small, or auto (small on CPU, full on CUDA)")]
ProblemOpt = Annotated[Optional[str], typer.Option("--problem", "-p", metavar="NAME", help="registered name or path to a KernelBench .py")]
PrecisionOpt = Annotated[str, typer.Option("--precision", metavar="DTYPE", help="fp32, fp16 or bf16: the dtype floating-point inputs "
                                            "and both models are cast to, with KernelBench's tolerance for it")]
BackendOpt = Annotated[Optional[str], typer.Option("--backend", metavar="LANG", help="the kernel language candidates are judged as: cuda, "
                                                   "cpp, triton, cute or tilelang (default: read from each one's code)")]

RunnerOpt = Annotated[str, typer.Option(metavar="RUNNER", help="local, or ray (one task per candidate on a Ray cluster)")]
AddressOpt = Annotated[Optional[str], typer.Option(metavar="ADDRESS", help="Ray cluster address (default: start a local one)")]
GpusOpt = Annotated[Optional[str], typer.Option(metavar="IDS", help="CUDA devices to use, e.g. 0,1 (default: every visible one)")]


class PanelledHelp(TyperCommand):
    """Plain help (click's, which reads at 80 columns) with a command's options under headings: PANELS maps a
    heading to its options' parameter names; the others stay under "Options"."""

    PANELS: dict[str, tuple[str, ...]] = {}

    def format_options(self, ctx, formatter) -> None:
        heading = {name: title for title, names in self.PANELS.items() for name in names}
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            if (record := param.get_help_record(ctx)) is not None:
                title = "Arguments" if param.param_type_name == "argument" else heading.get(param.name, "Options")
                sections.setdefault(title, []).append(record)
        for title in ("Arguments", *self.PANELS, "Options"):
            if title in sections:
                with formatter.section(title):
                    formatter.write_dl(sections[title])


class UserError(Exception):
    """Bad input: reported as one line, exit code 2, nothing stored is touched."""


def friendly(fn=None, *, also: tuple[type[Exception], ...] = ()):
    """Turn every known failure (and those of `also`: a command's own) into `kforge: error: ...` and exit 2, never
    a traceback. `@friendly`, or `@friendly(also=(...))`."""
    if fn is None:
        return functools.partial(friendly, also=also)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (UserError, ProblemError, EvaluatorError, _DatabaseError(), *also) as exc:
            err.print(f"kforge: error: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def runner_for(name: str, address: str | None) -> Backend | None:
    """The local evaluator (None: the default) or the Ray one; the caller stores the verdicts either way."""
    if name == "local":
        return None
    if name == "ray":
        from evaluator.parent import ray_backend  # Ray is an optional extra: imported only when asked for
        return functools.partial(ray_backend.evaluate, address=address)
    raise UserError(f"--runner must be local or ray, not '{name}'")


def _DatabaseError() -> type[Exception]:  # noqa: N802 - a class, loaded when an error is being handled
    from db import DatabaseError

    return DatabaseError


def problems_dir() -> Path | None:
    """KFORGE_PROBLEMS_DIR, handed to every registry call (the registry reads no environment)."""
    return Settings().problems_dir


def open_db(url: str | None) -> Database:
    from db import Database

    url = url or Settings().db
    database = Database(url) if url else Database.default()
    if database.created:  # said once, so that a mistyped path is noticed before results go into a new file
        err.print(f"kforge: new database {database.url}", markup=False, highlight=False, soft_wrap=True)
    return database


def resolve_size(size: str, device: str) -> str:
    """--size auto means what each device is judged at: the problem's small sizes on CPU, its own on CUDA."""
    if size == "auto":
        size = "small" if device == "cpu" else "full"
    if size not in ("full", "small"):
        raise UserError(f"--size must be full, small or auto, not '{size}'")
    return size


def resolve_precision(precision: str) -> str:
    if precision not in DTYPE_NAMES:
        raise UserError(f"--precision must be fp32, fp16 or bf16, not '{precision}'")
    return precision


def eval_settings(device: str | None, size: str, jobs: int | None = None, compile_baseline: bool = False,
                  gpus: str | None = None, backend: str | None = None, precision: str = "fp32") -> EvalSettings:
    cfg = Settings()
    try:
        language = language_of("", backend) if backend else None
    except ValueError as exc:
        raise UserError(f"--backend: {exc}") from None
    device = device or cfg.device or auto_device()
    if device not in ("cpu", "cuda"):
        raise UserError(f"--device must be cpu or cuda, not '{device}'")
    if device == "cuda" and auto_device() != "cuda":  # torch would fail deep inside with an 80-line traceback
        raise UserError("device cuda, but torch sees no CUDA device here (use --device cpu)")
    size = resolve_size(size, device)
    limits = Limits(**{k: v for k, v in (("timeout_s", cfg.timeout_s), ("memory_mb", cfg.memory_mb)) if v is not None})
    return EvalSettings(device=device, size=size, jobs=jobs, limits=limits, build_root=cfg.build_root,
                        compile_baseline=compile_baseline, gpus=gpus.split(",") if gpus else None, sandbox=sandbox_mode(),
                        language=language, precision=resolve_precision(precision), forward_server=cfg.forward_server,
                        cuda_forward_server=cfg.cuda_forward_server)


def check_sizes(problems, settings: EvalSettings) -> None:
    """Each problem runs at the size asked, or the command stops here, before anything is stored or run: a problem
    with no small size is refused in one line (ProblemError), never judged at full size under the name small."""
    for problem in {p.name: p for p in problems}.values():
        problem.overrides(settings.size)


def say_compile_plan(settings: EvalSettings) -> CompilePlan:
    """Said once by each command that compiles candidates, before its first compile; returned for the progress bar."""
    from evaluator.parent.batch import compile_plan  # torch: not on the path of --help

    plan = compile_plan(settings)
    err.print(f"kforge: {plan.why}", markup=False, highlight=False, soft_wrap=True)
    return plan


def sandbox_mode() -> str:
    """KFORGE_SANDBOX, for every command that starts evaluator children."""
    mode = Settings().sandbox
    if mode not in ("strict", "warn"):
        raise UserError(f"KFORGE_SANDBOX must be strict or warn, not '{mode}'")
    return mode
