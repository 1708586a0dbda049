"""The layout rules of issue 21, checked on the source tree: the folders are the layers and
each imports only the layers below it; no import circles (Python or C++ includes); no file over
800 lines and no function over 100; the decoder's round asks nothing about its drafter; no
learned state stuck onto models; Model has one context, never an `if remote` branch."""
from __future__ import annotations

import ast
import pathlib
import re


REPO = pathlib.Path(__file__).resolve().parents[2]
PKG = REPO / "pyllamaspec"
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100

# What each layer may import (besides itself). The root package (pyllamaspec/__init__.py and
# the entry points cli.py, server.py, rpc_server.py) may import anything.
LAYERS = {
    "errors": set(),
    "files": {"errors"},
    "engine": {"errors", "files"},
    "rpc": {"errors", "engine"},
    "speculation": {"errors", "engine"},
    "structured": {"errors", "engine"},
    "vision": {"errors", "engine"},
    "generation": {"errors", "files", "engine", "speculation", "structured", "vision"},
    "frontends": {"errors", "files", "engine", "speculation", "structured", "generation", "vision"},
    "bench": {"errors", "files", "engine", "speculation", "structured", "generation", "frontends", "vision"},
}


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(REPO).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the pyllamaspec modules it imports (at any depth: a lazy import is a dependency too)."""
    mods = _modules()
    graph = {}
    for m, (f, is_pkg) in mods.items():
        base = m.split(".") if is_pkg else m.split(".")[:-1]
        deps = set()
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.ImportFrom):
                if n.level:
                    target = ".".join(base[:len(base) - (n.level - 1)] + ([n.module] if n.module else []))
                else:
                    target = n.module or ""
                for a in n.names:
                    cand = f"{target}.{a.name}"
                    deps.add(cand if cand in mods else target)
            elif isinstance(n, ast.Import):
                deps.update(a.name for a in n.names)
        graph[m] = {d for d in deps if d in mods and d != m}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_python_import_circles():
    assert cycles(import_graph()) == []


def test_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, deps in graph.items():
        lm = _layer(m)
        if lm is None:
            continue
        for d in deps:
            ld = _layer(d)
            if ld is not None and ld != lm and ld not in LAYERS[lm]:
                bad.append(f"{m} ({lm}) imports {d} ({ld})")
    return sorted(bad)


def test_layers_import_only_the_layers_below():
    assert layer_violations(import_graph()) == []


def test_layer_check_catches_an_upward_import():
    assert layer_violations({"pyllamaspec.engine.model": {"pyllamaspec.speculation.decoder"},
                             "pyllamaspec.speculation.decoder": set()}) == [
        "pyllamaspec.engine.model (engine) imports pyllamaspec.speculation.decoder (speculation)"]


def _sources(*patterns: str) -> list[pathlib.Path]:
    skip = {REPO / "vendor", REPO / "build", REPO / ".venv"}
    return sorted(f for p in patterns for f in REPO.rglob(p)
                  if not any(s in f.parents for s in skip) and "build" not in f.relative_to(REPO).parts[:1])


def test_no_file_over_800_lines():
    long = [f"{f.relative_to(REPO)}: {n}" for f in _sources("*.py", "*.cpp", "*.h")
            if (n := len(f.read_text(errors="replace").splitlines())) > MAX_FILE_LINES]
    assert long == []


def long_python_functions(files: list[pathlib.Path]) -> list[str]:
    out = []
    for f in files:
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES:
                out.append(f"{f.relative_to(REPO)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    return out


def test_no_python_function_over_100_lines():
    assert long_python_functions(_sources("*.py")) == []


def long_cpp_functions(text: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, int]]:
    """(first line, length) of each brace block over `limit` lines opened at namespace level
    that is not a namespace, extern "C", class/struct/enum or an initializer (a function body)."""
    src = re.sub(r"//[^\n]*", "", text)
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), src, flags=re.S)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    src = re.sub(r"'(\\.|[^'\\\n])'", "''", src)
    opener = re.compile(r'(namespace\s*[\w:]*|extern\s*""|(struct|class|union|enum)\s*[\w:]*[^;{)]*|=\s*|\]\s*)$')
    blocks, out, line = [], [], 1
    for i, ch in enumerate(src):
        if ch == "\n":
            line += 1
        elif ch == "{":
            blocks.append(("scope" if opener.search(src[max(0, i - 300):i].rstrip()) else "body", line))
        elif ch == "}" and blocks:
            kind, first = blocks.pop()
            if kind == "body" and all(k == "scope" for k, _ in blocks) and line - first + 1 > limit:
                out.append((first, line - first + 1))
    return out


def test_no_cpp_function_over_100_lines():
    long = [f"{f.relative_to(REPO)}:{first} ({n} lines)" for f in _sources("*.cpp", "*.h")
            if f.parts[-2:] != ("csrc", "unicode_data.cpp") and f.name != "unicode_data.cpp"
            for first, n in long_cpp_functions(f.read_text())]
    assert long == []


def test_cpp_function_finder_sees_a_long_function():
    body = "\n".join(["    x++;"] * 120)
    text = f'namespace psl {{\nstruct S {{ int a; }};\nextern "C" {{\nint f() {{\n{body}\n}}\n}}\n}}\n'
    assert long_cpp_functions(text) == [(4, 122)]
    assert long_cpp_functions("static const int t[] = {\n" + "1,\n" * 200 + "};\n") == []


def include_graph() -> dict[str, set[str]]:
    """csrc unit (a .cpp and its .h as one node, by path without suffix) -> the units it includes."""
    root = REPO / "csrc"
    files = list(root.rglob("*.cpp")) + list(root.rglob("*.h"))
    units = {f.relative_to(root).with_suffix("").as_posix() for f in files}
    graph: dict[str, set[str]] = {u: set() for u in units}
    for f in files:
        u = f.relative_to(root).with_suffix("").as_posix()
        for inc in re.findall(r'^#include "([^"]+)"', f.read_text(), flags=re.M):
            for cand in (inc, (f.parent / inc).relative_to(root).as_posix() if (f.parent / inc).exists() else inc):
                key = pathlib.PurePosixPath(cand).with_suffix("").as_posix()
                if key in units and key != u:
                    graph[u].add(key)
                    break
    return graph


def test_no_cpp_include_circles():
    assert cycles(include_graph()) == []


# The model level of csrc/ (ARCHITECTURE.md): the loader (model, error: the top-level files) and
# the folders beside and below it (kernels/: custom ggml nodes on ggml's tensors alone, whose
# layout the loader keeps for them). Every other folder reads the model, so none is included here.
CPP_MODEL_LEVEL = {"", "host", "gguf", "kernels", "vocab"}


def model_level_violations(graph: dict[str, set[str]]) -> list[str]:
    def folder(unit: str) -> str:
        return unit.split("/")[0] if "/" in unit else ""
    return sorted(f"{u} includes {d}" for u, deps in graph.items() if folder(u) in CPP_MODEL_LEVEL
                  for d in deps if folder(d) not in CPP_MODEL_LEVEL)


def test_model_level_includes_no_folder_above_it():
    assert model_level_violations(include_graph()) == []


def test_model_level_check_catches_an_upward_include():
    assert model_level_violations({"model": {"error", "host/huge_pages", "engine/compute_thread"},
                                   "vocab/vocab": {"memory/kv_cache", "gguf/gguf_file"},
                                   "engine/context": {"model", "memory/kv_cache"}}) == [
        "model includes engine/compute_thread", "vocab/vocab includes memory/kv_cache"]


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _class(path: pathlib.Path, name: str) -> ast.ClassDef:
    return next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef) and n.name == name)


def test_the_round_reads_like_the_paper():
    """Decoder.step(): at most ~40 lines and no question about which drafter it holds."""
    step = _method(_class(PKG / "speculation" / "decoder.py", "Decoder"), "step")
    assert step.end_lineno - step.lineno + 1 <= 40
    calls = {n.func.id for n in ast.walk(step) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"isinstance", "type", "hasattr", "getattr"}
    names = {n.id for n in ast.walk(step) if isinstance(n, ast.Name)}
    assert not names & {"DraftModelDrafter", "NgramDrafter", "MtpDrafter"}


def test_no_learned_state_on_models():
    hits = [f"{f.relative_to(REPO)}:{i}" for f in PKG.rglob("*.py")
            for i, line in enumerate(f.read_text().splitlines(), 1) if re.search(r"\._psl_\w+", line)]
    assert hits == []


def test_model_has_no_remote_branches():
    model = _class(PKG / "engine" / "model.py", "Model")
    names = {n.attr for n in ast.walk(model) if isinstance(n, ast.Attribute)}
    assert "_remote" not in names and "_ctx" not in names


def test_architecture_names_every_module():
    """ARCHITECTURE.md is the one map: every Python module is named in it (by file name)."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    missing = sorted(str(f.relative_to(REPO)) for f in PKG.rglob("*.py")
                     if f.name != "__init__.py" and f.name not in text)
    assert missing == [], f"ARCHITECTURE.md does not name {missing}"
