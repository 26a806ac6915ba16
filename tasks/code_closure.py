"""A stage's code version, derived from the code it really runs (docs/architecture.md#the-design-contract): never a hand-kept list.

The code version of a task module is the sha256 of every project file it can execute or load:

1. the transitive closure of the project modules (packages ``rla_core``, ``tasks``, ``flows``) it
   imports, found by reading the ``import`` / ``from … import`` statements of each module's source
   (static AST analysis: imports inside functions and ``TYPE_CHECKING`` blocks count too, which only
   ever adds files), with the ``__init__.py`` of every package on the way (importing ``a.b.c`` runs
   ``a/__init__.py`` and ``a/b/__init__.py``);
2. the files those modules run or read rather than import — the sandbox launcher run as a script,
   the prompt templates read as resources, future worker scripts. A module declares them next to the
   code that loads them, as a module-level constant of literal strings (paths relative to the
   module's folder, glob patterns allowed)::

       CODE_RESOURCES = ("_launcher.py",)          # rla_core/sandbox/runner.py
       CODE_RESOURCES = ("templates/*.txt",)      # rla_core/envs/prompts.py

   A declared ``.py`` resource is analysed like a module (its own imports count too).

Third-party packages are not part of it (their versions are the environment's, not the run's).
Preset YAML files are not either: a preset only fills config values, and the config is keyed
separately (the stored run config is fully expanded, so editing a preset changes no existing run).

The result is deterministic (files sorted by their path relative to the project root; a file counts
with that path and its bytes) and computed once per process and module (it runs on every resume).

Example:
    >>> CodeIndex.default().version("tasks.label")  # doctest: +SKIP
    '3f0c9a41d2be7c55'
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_PACKAGES: tuple[str, ...] = ("rla_core", "tasks", "flows")
RESOURCES_NAME = "CODE_RESOURCES"


class CodeClosureError(ValueError):
    """A project module cannot be resolved or its resource declaration is malformed."""


@dataclass(frozen=True)
class _Module:
    name: str
    path: Path
    is_package: bool


@dataclass
class CodeIndex:
    """Resolves project module names to files under ``roots`` (top-level package → folder holding it)."""

    roots: Mapping[str, Path]
    _closures: dict[str, tuple[Path, ...]] = field(default_factory=dict, repr=False)
    _edge_cache: dict[Path, tuple[list[_Module], list[Path]]] = field(default_factory=dict, repr=False)

    @staticmethod
    @functools.cache
    def default() -> CodeIndex:
        """The index of the importable project packages (a source checkout or an installed wheel)."""
        roots: dict[str, Path] = {}
        for pkg in PROJECT_PACKAGES:
            spec = importlib.util.find_spec(pkg)
            if spec is None or spec.origin is None:
                raise CodeClosureError(f"project package '{pkg}' is not importable; install the project")
            roots[pkg] = Path(spec.origin).resolve().parent.parent
        return CodeIndex(roots)

    @staticmethod
    def at(root: Path) -> CodeIndex:
        """An index of the project packages as laid out under one folder (e.g. a copy of the tree)."""
        return CodeIndex({pkg: Path(root) for pkg in PROJECT_PACKAGES})

    def find(self, name: str) -> _Module | None:
        """The file of project module ``name``; None for a name outside the project or not a module."""
        top = name.split(".", 1)[0]
        root = self.roots.get(top)
        if root is None:
            return None
        base = root.joinpath(*name.split("."))
        if (base / "__init__.py").is_file():
            return _Module(name, base / "__init__.py", True)
        if base.with_suffix(".py").is_file():
            return _Module(name, base.with_suffix(".py"), False)
        return None

    def _with_parents(self, name: str) -> list[_Module]:
        parts = name.split(".")
        found = [self.find(".".join(parts[:i])) for i in range(1, len(parts) + 1)]
        return [m for m in found if m is not None]

    def _imports(self, module: _Module, tree: ast.AST) -> set[str]:
        """Candidate module names of every import statement in ``tree`` (unresolvable ones are dropped later)."""
        names: set[str] = set()
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    if node.level - 1 > len(parts) - 1:
                        raise CodeClosureError(
                            f"{module.path}: relative import beyond the top-level package at line {node.lineno}"
                        )
                    anchor = ".".join(parts[: len(parts) - (node.level - 1)])
                    base = f"{anchor}.{node.module}" if node.module else anchor
                else:
                    base = node.module or ""
                names.add(base)
                # `from pkg import name`: name may be a submodule.
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        return names

    @staticmethod
    def _resources(path: Path, tree: ast.Module) -> list[Path]:
        """Files declared in a module-level ``CODE_RESOURCES`` constant (see the module docstring)."""
        out: list[Path] = []
        for node in tree.body:
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, ast.AnnAssign):
                targets, value = [node.target], node.value
            if value is None or not any(isinstance(t, ast.Name) and t.id == RESOURCES_NAME for t in targets):
                continue
            try:
                patterns = ast.literal_eval(value)
            except ValueError:
                patterns = None
            if not isinstance(patterns, tuple | list) or not all(isinstance(p, str) for p in patterns):
                raise CodeClosureError(
                    f"{path}:{node.lineno}: {RESOURCES_NAME} must be a tuple of literal strings (paths relative "
                    "to the module's folder, globs allowed)"
                )
            for pattern in patterns:
                matched = sorted(p for p in path.parent.glob(pattern) if p.is_file())
                if not matched:
                    raise CodeClosureError(
                        f"{path}:{node.lineno}: {RESOURCES_NAME} entry '{pattern}' matches no file next to "
                        "the module; fix the path or remove the entry"
                    )
                out.extend(matched)
        return out

    def _edges(self, module: _Module) -> tuple[list[_Module], list[Path]]:
        """The project modules a module's import statements name, and its declared resources (memoised)."""
        if module.path not in self._edge_cache:
            tree = ast.parse(module.path.read_bytes(), filename=str(module.path))
            imported = [m for name in sorted(self._imports(module, tree)) for m in self._with_parents(name)]
            self._edge_cache[module.path] = (imported, self._resources(module.path, tree))
        return self._edge_cache[module.path]

    def closure(self, module_name: str) -> tuple[Path, ...]:
        """Every project file module ``module_name`` imports (transitively) or declares as a resource."""
        if module_name in self._closures:
            return self._closures[module_name]
        start = self._with_parents(module_name)
        if not start or start[-1].name != module_name:
            raise CodeClosureError(
                f"'{module_name}' is not a module of the project packages {', '.join(PROJECT_PACKAGES)}"
            )
        seen: set[Path] = set()
        todo: list[_Module] = list(start)
        while todo:
            module = todo.pop()
            if module.path in seen:
                continue
            seen.add(module.path)
            imported, resources = self._edges(module)
            todo.extend(m for m in imported if m.path not in seen)
            for res in resources:
                if res.suffix == ".py":
                    # A script the module runs: its imports run too (resolved from its own package).
                    package = module.name if module.is_package else module.name.rpartition(".")[0]
                    todo.append(_Module(f"{package}.{res.stem}", res, False))
                else:
                    seen.add(res)
        files = tuple(sorted(seen, key=self._relative))
        self._closures[module_name] = files
        return files

    def modules(self) -> list[str]:
        """Every module of the project packages (sorted names)."""
        names = []
        for pkg in PROJECT_PACKAGES:
            root = self.roots[pkg]
            for path in sorted((root / pkg).rglob("*.py")):
                parts = path.relative_to(root).with_suffix("").parts
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        return sorted(names)

    def imports_of(self, module_name: str) -> set[str]:
        """The project modules ``module_name``'s import statements name (the same AST walk as the closure:
        function-level and ``TYPE_CHECKING`` imports count), without its own parent packages, which
        Python imports before the module anyway; the import graph's edges."""
        module = self.find(module_name)
        if module is None:
            raise CodeClosureError(f"'{module_name}' is not a module of the project packages")
        tree = ast.parse(module.path.read_bytes(), filename=str(module.path))
        found = {m.name for name in self._imports(module, tree) if (m := self.find(name)) is not None}
        parts = module_name.split(".")
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
        # `from pkg import name` also names `pkg`; keep `pkg` only when no submodule of it was imported.
        named = {n for n in found if not any(o.startswith(n + ".") for o in found)}
        return named - ancestors - {module_name}

    def _relative(self, path: Path) -> str:
        for root in sorted(set(self.roots.values()), key=lambda p: -len(p.parts)):
            if path.is_relative_to(root):
                return path.relative_to(root).as_posix()
        return path.as_posix()

    def version(self, module_name: str) -> str:
        """16 hex digits of sha256 over (relative path, bytes) of :meth:`closure`'s files."""
        return digest_files(self.closure(module_name), self._relative)


def digest_files(files: Iterable[Path], label: Callable[[Path], str]) -> str:
    """sha256 over each file's label (its project-relative path) and bytes, in the given order."""
    hasher = hashlib.sha256()
    for path in files:
        hasher.update(label(path).encode() + b"\0")
        data = path.read_bytes()
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.hexdigest()[:16]


@functools.cache
def code_version(module_name: str) -> str:
    """The code version of a project module in this process's installed/checked-out project (cached)."""
    return CodeIndex.default().version(module_name)
