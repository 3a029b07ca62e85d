"""Read facts straight from the pinned vLLM wheel, as text and ast: never import vllm.

The wheel (``pip download --no-deps vllm==<version>``, about 340 MB) is cached under
``$SPECOPS_CACHE/vllm`` (default ``~/.cache/specops/vllm``). Conformance tests, the CRD's
method enum check and the dashboards compare specops's constants with what this reads.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specops.cache import cache_root
from specops.errors import SpecopsError
from specops.vllm._speculative_config import VLLM_VERSION

__all__ = [
    "ReleaseError",
    "ReleaseMetric",
    "ensure_wheel",
    "release_bucket_families",
    "release_finish_reasons",
    "release_label_values",
    "release_metrics",
    "release_speculative_keys",
    "release_speculative_methods",
    "wheel_source",
]

_LOGGERS = "vllm/v1/metrics/loggers.py"
_SPEC_METRICS = "vllm/v1/spec_decode/metrics.py"
_PERF = "vllm/v1/metrics/perf.py"
_BUCKETS = "vllm/v1/metrics/buckets.py"
_SPEC_CONFIG = "vllm/config/speculative.py"
_ENGINE = "vllm/v1/engine/__init__.py"
# The configs log_metrics_info describes, by its type argument: module and class.
_INFO_CONFIGS = {"cache_config": ("vllm.config.cache", "CacheConfig")}
_KINDS = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}


class ReleaseError(SpecopsError):
    """The vLLM wheel could not be fetched or did not hold what specops expects."""


def _cache_dir() -> Path:
    return cache_root() / "vllm"


def ensure_wheel(version: str = VLLM_VERSION) -> Path:
    """The cached wheel of vLLM ``version``, downloaded with pip (no dependencies) if absent."""
    directory = _cache_dir()
    found = sorted(directory.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["-d", str(directory), f"vllm=={version}"]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    found = sorted(directory.glob(f"vllm-{version}-*.whl"))
    if completed.returncode != 0 or not found:
        raise ReleaseError(f"could not download vllm=={version}: {completed.stderr[-2000:]}")
    return found[0]


@cache
def wheel_source(wheel: Path, member: str) -> str:
    """One source file of the wheel, as text."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.read(member).decode("utf-8")
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ReleaseError(f"{wheel.name} has no readable {member}") from exc


@dataclass(frozen=True)
class ReleaseMetric:
    """A metric as the release registers it; ``bucket_family`` from its histogram_buckets call.

    ``always``: registered whatever the configuration (not under an ``if``, nor after an
    early return such as SpecDecodingProm's without a speculative config).
    """

    name: str
    kind: str
    labels: tuple[str, ...]
    bucket_family: str | None
    always: bool


class _Resolver:
    """Evaluates the small expressions vLLM builds names and label lists from."""

    def __init__(self, tree: ast.AST, seed: dict[str, object]) -> None:
        self.values: dict[str, ast.expr] = {}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                self.values.setdefault(node.targets[0].id, node.value)
        self.seed = seed

    def value(self, node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple):
            return tuple(self.value(element) for element in node.elts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left), self.value(node.right)
            assert isinstance(left, tuple) and isinstance(right, tuple)
            return left + right
        if isinstance(node, ast.Name):
            if node.id in self.seed:
                return self.seed[node.id]
            return self.value(self.values[node.id])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id == "histogram_buckets":
                return ("family", self.value(node.args[0]))
            if node.func.id == "list":
                return self.value(node.args[0])
        raise ReleaseError(f"cannot evaluate {ast.unparse(node)}")


def _conditional_calls(tree: ast.AST) -> set[int]:
    """The ids of the calls a function makes only under a condition: inside an ``if``, or
    after an ``if`` that returns early."""
    conditional: set[int] = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        gated = False
        for statement in function.body:
            if gated or isinstance(statement, ast.If):
                conditional.update(id(n) for n in ast.walk(statement) if isinstance(n, ast.Call))
            if isinstance(statement, ast.If) and isinstance(statement.body[-1], ast.Return):
                gated = True
    return conditional


def _metric_calls(source: str, seed: dict[str, object]) -> list[ReleaseMetric]:
    tree = ast.parse(source)
    resolver = _Resolver(tree, seed)
    conditional = _conditional_calls(tree)
    found: list[ReleaseMetric] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        kind = _KINDS.get(node.func.attr)
        if kind is None:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        names: list[str]
        name_node = keywords["name"]
        if isinstance(name_node, ast.Constant):
            names = [str(name_node.value)]
        elif not (isinstance(name_node, ast.Name) and name_node.id == "name"):
            continue
        else:
            names = [
                str(entry[0])
                for entry in _tuples_named(tree, "counter_specs", resolver)
                if str(entry[0]).startswith("vllm:spec_decode")
            ]
        try:
            labels = resolver.value(keywords["labelnames"])
        except (ReleaseError, KeyError):
            labels = (f"<{ast.unparse(keywords['labelnames'])}>",)
        assert isinstance(labels, tuple)
        family = None
        if "buckets" in keywords:
            bucket = resolver.value(keywords["buckets"])
            assert isinstance(bucket, tuple)
            family = str(bucket[1])
        always = id(node) not in conditional
        found += [
            ReleaseMetric(n, kind, tuple(str(x) for x in labels), family, always) for n in names
        ]
    return found


def _tuples_named(tree: ast.AST, name: str, resolver: _Resolver) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
            and isinstance(node.value, ast.List)
        ):
            for element in node.value.elts:
                row = resolver.value(element)
                assert isinstance(row, tuple)
                rows.append(row)
    return rows


def release_metrics(wheel: Path) -> dict[str, ReleaseMetric]:
    """Every engine, performance, spec-decode and info metric the Prometheus stat logger
    registers."""
    source = wheel_source(wheel, _LOGGERS)
    loggers = _metric_calls(source, {})
    engine_labels = next(m.labels for m in loggers if m.name == "vllm:num_requests_running")
    seed: dict[str, object] = {"labelnames": engine_labels}
    perf = _metric_calls(wheel_source(wheel, _PERF), seed)
    spec = _metric_calls(wheel_source(wheel, _SPEC_METRICS), seed)
    info = _info_gauges(wheel, ast.parse(source))
    return {metric.name: metric for metric in (*loggers, *perf, *spec, *info)}


def _info_gauges(wheel: Path, loggers: ast.AST) -> list[ReleaseMetric]:
    """The gauges ``log_metrics_info`` registers, one a config type (``if type == ...:
    name = ...``), labelled with the config's fields (``metrics_info()`` is its
    ``__dict__``) and the engine; it runs when the engine starts, whatever the config."""
    found: list[ReleaseMetric] = []
    for function in ast.walk(loggers):
        if not (isinstance(function, ast.FunctionDef) and function.name == "log_metrics_info"):
            continue
        for branch in ast.walk(function):
            if not (isinstance(branch, ast.If) and isinstance(branch.test, ast.Compare)):
                continue
            kind = branch.test.comparators[0]
            named = [
                n.value.value
                for n in branch.body
                if isinstance(n, ast.Assign)
                and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id == "name"
                and isinstance(n.value, ast.Constant)
            ]
            if not (isinstance(kind, ast.Constant) and named):
                continue
            if kind.value not in _INFO_CONFIGS:
                raise ReleaseError(f"log_metrics_info describes {kind.value!r}, a config unknown")
            module, name = _INFO_CONFIGS[kind.value]
            fields = _fields(_module_class(wheel, module, name))
            found.append(ReleaseMetric(str(named[0]), "gauge", (*fields, "engine"), None, True))
    return found


def _fields(node: ast.ClassDef) -> tuple[str, ...]:
    """A dataclass's fields in declaration order (its annotated names, less ClassVars)."""
    return tuple(
        item.target.id
        for item in node.body
        if isinstance(item, ast.AnnAssign)
        and isinstance(item.target, ast.Name)
        and not ast.unparse(item.annotation).startswith("ClassVar")
    )


def _module_class(wheel: Path, module: str, name: str) -> ast.ClassDef:
    base = module.replace(".", "/")
    for member in (f"{base}.py", f"{base}/__init__.py"):
        with suppress(ReleaseError):
            for node in ast.walk(ast.parse(wheel_source(wheel, member))):
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return node
    raise ReleaseError(f"no class {name} in {module}")


def _class_strings(node: ast.ClassDef, attribute: str | None) -> tuple[str, ...]:
    """An enum's member values (``attribute`` None) or a class attribute's literal strings."""
    values: list[str] = []
    for item in node.body:
        target = item.targets[0] if isinstance(item, ast.Assign) else getattr(item, "target", None)
        value = getattr(item, "value", None)
        if not isinstance(target, ast.Name) or value is None:
            continue
        if attribute is None and isinstance(value, ast.Constant) and isinstance(value.value, str):
            values.append(value.value)
        elif target.id == attribute:
            return tuple(str(v) for v in ast.literal_eval(value))
    return tuple(values)


def release_label_values(wheel: Path) -> dict[str, tuple[str, ...]]:
    """For each family the Prometheus stat logger always registers with a label beyond
    model_name and engine, the values it creates a child for when it starts: read from the
    loop after its registration that creates the children (``str(FinishReason)`` is
    FINISH_REASON_STRINGS)."""
    tree = ast.parse(wheel_source(wheel, _LOGGERS))
    evaluate = _iterable_evaluator(wheel, tree)
    labelled = {
        m.name
        for m in release_metrics(wheel).values()
        if m.always and m.labels[-1] not in ("model_name", "engine")
    }
    registered: dict[str, str] = {}
    values: dict[str, tuple[str, ...]] = {}
    for statement in _stat_logger_init(tree).body:
        registered.update(_registrations(statement, labelled))
        for body, iterable in _loops(statement):
            for variable, metric in registered.items():
                used = re.search(rf"(?<![\w.]){re.escape(variable)}\b", body)
                if metric not in values and used:
                    values[metric] = evaluate(iterable)
    missing = labelled - set(values)
    if missing:
        raise ReleaseError(f"no loop creates the children of {sorted(missing)}")
    return values


def _iterable_evaluator(wheel: Path, tree: ast.Module) -> Callable[[ast.expr], tuple[str, ...]]:
    """The strings a loop of the loggers' module iterates over: FinishReason's, an imported
    class's constants or one of its attributes, or a literal the module spells out."""
    resolver = _Resolver(tree, {})
    imports = {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }

    def evaluate(node: ast.expr) -> tuple[str, ...]:
        if isinstance(node, ast.Name) and node.id == "FinishReason":
            return release_finish_reasons(wheel)
        if isinstance(node, ast.Name) and node.id in imports:
            return _class_strings(_module_class(wheel, imports[node.id], node.id), None)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = _module_class(wheel, imports[node.value.id], node.value.id)
            return _class_strings(owner, node.attr)
        value = resolver.value(node)
        assert isinstance(value, tuple)
        return tuple(str(v) for v in value)

    return evaluate


def _stat_logger_init(tree: ast.Module) -> ast.FunctionDef:
    return next(
        item
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "PrometheusStatLogger"
        for item in node.body
        if isinstance(item, ast.FunctionDef) and item.name == "__init__"
    )


def _registrations(statement: ast.stmt, labelled: set[str]) -> dict[str, str]:
    """``self.x = Family(name="...")`` for one of ``labelled``: the variable and the family."""
    if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)):
        return {}
    keywords = {k.arg: k.value for k in statement.value.keywords}
    name = keywords.get("name")
    if isinstance(name, ast.Constant) and name.value in labelled:
        return {ast.unparse(statement.targets[0]): str(name.value)}
    return {}


def _loops(statement: ast.stmt) -> Iterator[tuple[str, ast.expr]]:
    """Each loop or comprehension inside ``statement``: its body as source, and what it
    iterates over."""
    for loop in ast.walk(statement):
        if isinstance(loop, ast.For):
            yield "\n".join(ast.unparse(b) for b in loop.body), loop.iter
        elif isinstance(loop, ast.DictComp | ast.ListComp):
            yield ast.unparse(loop), loop.generators[0].iter


def release_bucket_families(wheel: Path) -> dict[str, tuple[float, ...]]:
    """buckets.py's static families: family name to its default bounds."""
    tree = ast.parse(wheel_source(wheel, _BUCKETS))
    constants: dict[str, tuple[float, ...]] = {}
    families: dict[str, tuple[float, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            if isinstance(node.value, ast.Tuple):
                constants[node.target.id] = tuple(float(v) for v in ast.literal_eval(node.value))
            elif isinstance(node.value, ast.Dict) and node.target.id == "_STATIC_FAMILY_DEFAULTS":
                for key, value in zip(node.value.keys, node.value.values, strict=True):
                    assert isinstance(key, ast.Constant) and isinstance(value, ast.Name)
                    families[str(key.value)] = constants[value.id]
    return families


def _literal_strings(tree: ast.AST, name: str) -> frozenset[str]:
    aliases: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            aliases[node.targets[0].id] = node.value

    def strings(node: ast.expr) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.Name):
            return strings(aliases[node.id])
        if isinstance(node, ast.Subscript):
            return strings(node.slice)
        if isinstance(node, ast.Tuple):
            return set().union(*(strings(e) for e in node.elts))
        raise ReleaseError(f"unexpected {ast.unparse(node)} in {name}")

    return frozenset(strings(aliases[name]))


def release_speculative_methods(wheel: Path) -> frozenset[str]:
    """Every value of vLLM's ``SpeculativeMethod`` literal."""
    return _literal_strings(ast.parse(wheel_source(wheel, _SPEC_CONFIG)), "SpeculativeMethod")


def release_speculative_keys(wheel: Path) -> frozenset[str]:
    """The field names of vLLM's SpeculativeConfig: the keys --speculative-config takes."""
    tree = ast.parse(wheel_source(wheel, _SPEC_CONFIG))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            return frozenset(
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            )
    raise ReleaseError("SpeculativeConfig not found")


def release_finish_reasons(wheel: Path) -> tuple[str, ...]:
    """FINISH_REASON_STRINGS: the values of request_success's finished_reason label."""
    tree = ast.parse(wheel_source(wheel, _ENGINE))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "FINISH_REASON_STRINGS"
        ):
            return tuple(str(v) for v in ast.literal_eval(node.value))
    raise ReleaseError("FINISH_REASON_STRINGS not found")
