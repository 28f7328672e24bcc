"""`scan-imports`: where do carried packages (vllm, verl, ...) import the dependencies we skip, and how?

Static (ast) scan of the .py files inside wheels or source dirs. Each import site of a wanted top-level module is
classified:
  unguarded    at module/class level, outside try and if: importing that module fails without the dependency
  guarded      at module level inside `try` whose handlers catch ImportError (or a base of it)
  conditional  at module level under an `if` (e.g. an env flag or a platform check); the condition is recorded
  type-only    under `if TYPE_CHECKING:` (never runs)
  lazy         inside a function: runs only when that function is called (guarded or not is recorded too)
  dynamic      importlib.import_module / __import__ with a constant name (find_spec probes are ignored)
For unguarded sites the importing module is also checked for reachability from GRPO-path root modules: through
unguarded, unconditional module-level imports only ("certain": importing the roots always imports it, so a missing
dependency there is an ImportError at start-up), through any module-level import, including those inside try/if
("eager": importing the roots may import it, depending on guards and conditions), or also through imports inside
functions ("possible": some call path may import it).
"""

from __future__ import annotations

import ast
import zipfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

# Modules the GRPO path (verl main_ppo + vLLM async server rollout + FSDP2 actor) imports.
DEFAULT_ROOTS = (
    "verl.trainer.main_ppo",
    "verl.trainer.ppo.ray_trainer",
    "verl.trainer.ppo.v1",
    "verl.trainer.ppo.v1.trainer_sync",
    "verl.workers.engine_workers",
    "verl.workers.engine.fsdp.transformer_impl",
    "verl.workers.rollout.replica",
    "verl.workers.rollout.vllm_rollout.vllm_async_server",
    "verl.experimental.agent_loop.agent_loop",
    "verl.experimental.reward_loop.reward_loop",
    "vllm",
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.sample.sampler",
    "vllm.model_executor.models.qwen2",
    "vllm.lora.request",
)
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class ImportSite:
    """One import of a wanted module."""

    wanted: str  # the wanted top-level module, e.g. flashinfer
    imported: str  # full name, e.g. flashinfer.sampling
    module: str  # the importing module, e.g. vllm.v1.sample.sampler
    line: int
    kind: str  # unguarded | guarded | conditional | type-only | lazy | dynamic
    context: str  # e.g. "if envs.VLLM_USE_FLASHINFER_SAMPLER", "def forward_native", "try/except ImportError"


@dataclass(frozen=True)
class _Ctx:
    kind: str  # def | try | except | if | else | class
    text: str
    guards: bool = False  # a try whose handlers catch ImportError
    type_only: bool = False  # the body of `if TYPE_CHECKING:`


def iter_sources(path: Path) -> Iterator[tuple[str, bool, str]]:
    """(module name, is a package __init__, source) for every .py file of a wheel or a directory of packages."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as zf:
            for name in sorted(zf.namelist()):
                if name.endswith(".py") and ".dist-info/" not in name and ".data/" not in name:
                    source = zf.read(name).decode("utf-8", errors="replace")
                    yield module_name(name), name.endswith("/__init__.py"), source
    else:
        for file in sorted(path.rglob("*.py")):
            source = file.read_text(encoding="utf-8", errors="replace")
            yield module_name(file.relative_to(path).as_posix()), file.name == "__init__.py", source


def module_name(relpath: str) -> str:
    """`vllm/v1/sample/sampler.py` -> `vllm.v1.sample.sampler`; `vllm/__init__.py` -> `vllm`."""
    parts = relpath[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class _Visitor(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, wanted: set[str]) -> None:
        self.module, self.is_package, self.wanted = module, is_package, wanted
        self.stack: list[_Ctx] = []
        self.sites: list[ImportSite] = []
        self.eager: set[str] = set()  # modules imported at module level (not type-only)
        self.certain: set[str] = set()  # module-level imports outside any try/if: they always run
        self.lazy: set[str] = set()  # modules imported inside functions

    # -- context ---------------------------------------------------------------------------------------------
    def _push(self, ctx: _Ctx, nodes: list[ast.stmt]) -> None:
        self.stack.append(ctx)
        for node in nodes:
            self.visit(node)
        self.stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for dec in node.decorator_list:
            self.visit(dec)
        self._push(_Ctx("def", node.name), node.body)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.stack.append(_Ctx("def", "<lambda>"))
        self.visit(node.body)
        self.stack.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._push(_Ctx("class", node.name), node.body)

    def visit_Try(self, node: ast.Try) -> None:
        caught = set()
        for handler in node.handlers:
            if handler.type is None:
                caught.add("BaseException")
            else:
                types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                caught |= {ast.unparse(t).split(".")[-1] for t in types}
        text = "try/except " + (", ".join(sorted(caught)) or "-")
        self._push(_Ctx("try", text, guards=bool(caught & _IMPORT_ERRORS)), node.body)
        for handler in node.handlers:
            self._push(_Ctx("except", text), handler.body)
        self._push(_Ctx("else", "try-else"), node.orelse)
        self._push(_Ctx("else", "finally"), node.finalbody)

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        test = ast.unparse(node.test)
        type_only = test in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        self._push(_Ctx("if", f"if {test}", type_only=type_only), node.body)
        self._push(_Ctx("if", f"if not ({test})"), node.orelse)

    # -- imports ---------------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._record(alias.name, node.lineno, [alias.name])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._resolve(node.module or "", node.level)
        names = [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
        self._record(base, node.lineno, names)

    def visit_Call(self, node: ast.Call) -> None:
        func = ast.unparse(node.func)
        if func.split(".")[-1] in ("import_module", "__import__") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                top = arg.value.split(".")[0]
                if top in self.wanted:
                    self.sites.append(ImportSite(top, arg.value, self.module, node.lineno, "dynamic", func))
        self.generic_visit(node)

    def _resolve(self, module: str, level: int) -> str:
        if level == 0:
            return module
        parts = self.module.split(".")
        base = parts if self.is_package else parts[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join([*base, module] if module else base)

    def _record(self, imported: str, line: int, graph_names: list[str]) -> None:
        in_def = any(c.kind == "def" for c in self.stack)
        type_only = any(c.type_only for c in self.stack)
        if not type_only:
            (self.lazy if in_def else self.eager).update(graph_names)
            if not in_def and not any(c.kind in ("try", "except", "else", "if") for c in self.stack):
                self.certain.update(graph_names)
        top = imported.split(".")[0]
        if top not in self.wanted:
            return
        guarded = any(c.guards for c in self.stack)
        conds = [c.text for c in self.stack if c.kind in ("if", "except", "else")]
        defs = [c.text for c in self.stack if c.kind == "def"]
        if type_only:
            kind, context = "type-only", "if TYPE_CHECKING"
        elif in_def:
            kind = "lazy"
            context = "def " + ".".join(defs) + (" (guarded)" if guarded else "") + "".join(f"; {c}" for c in conds)
        elif guarded:
            kind, context = "guarded", next(c.text for c in self.stack if c.guards)
        elif conds:
            kind, context = "conditional", "; ".join(conds)
        else:
            kind, context = "unguarded", "module level"
        self.sites.append(ImportSite(top, imported, self.module, line, kind, context))


@dataclass
class ScanResult:
    """Import sites of wanted modules plus the module import graph of everything scanned."""

    sites: list[ImportSite]
    eager: dict[str, set[str]]
    lazy: dict[str, set[str]]
    modules: set[str]
    unparsable: list[str]
    certain: dict[str, set[str]] = field(default_factory=dict)

    def reachable(
        self, roots: list[str] | tuple[str, ...], include_lazy: bool, certain_only: bool = False
    ) -> dict[str, str]:
        """Modules imported (transitively) when the roots are imported (with lazy imports: when anything runs;
        `certain_only`: through unguarded, unconditional module-level imports only, i.e. always), each mapped to
        the module that imports it first (roots map to "")."""
        parent: dict[str, str] = {}
        queue = deque((r, "") for r in roots if r in self.modules)
        while queue:
            mod, via = queue.popleft()
            if mod in parent:
                continue
            parent[mod] = via
            parts = mod.split(".")
            nexts = [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
            nexts += sorted((self.certain if certain_only else self.eager).get(mod, set()))
            if include_lazy and not certain_only:
                nexts += sorted(self.lazy.get(mod, set()))
            for name in nexts:
                # `from a.b import c` names a.b.c, which is a module only sometimes
                if name in self.modules and name not in parent:
                    queue.append((name, mod))
        return parent


def chain(parent: dict[str, str], module: str) -> list[str]:
    """The import chain root -> ... -> module found by `ScanResult.reachable`."""
    out = [module]
    while parent.get(out[-1]):
        out.append(parent[out[-1]])
    return out[::-1]


def scan(paths: list[Path], wanted: set[str]) -> ScanResult:
    """Parse every .py file of the given wheels/dirs; collect import sites of `wanted` and the import graph."""
    result = ScanResult([], {}, {}, set(), [])
    for path in paths:
        for module, is_package, source in iter_sources(path):
            result.modules.add(module)
            try:
                tree = ast.parse(source)
            except SyntaxError:
                result.unparsable.append(module)
                continue
            visitor = _Visitor(module, is_package, wanted)
            visitor.visit(tree)
            result.sites += visitor.sites
            result.eager[module] = visitor.eager
            result.certain[module] = visitor.certain
            result.lazy[module] = visitor.lazy
    return result
