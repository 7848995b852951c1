"""Module objects come back as the module's own objects; state a called function changes is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cross_process import run_process

from ipy_resume.fingerprint import fingerprint
from ipy_resume.runtime import modrefs

HELPER = """
class Config:
    def __init__(self):
        self.lr = 0.1

CONFIG = Config()
"""
IMPORTS = """%%checkpoint imports
import sys, logging
sys.path.insert(0, ".")
from scipy.stats import norm
from helpermod import CONFIG
log = logging.getLogger("corpus.logger")
"""
FIT = "%%checkpoint fit\nimport numpy as np\nmu, sigma = norm.fit(np.arange(20.0))"
READ = "%%checkpoint read\nq = float(norm.ppf(0.9, mu, sigma)) + CONFIG.lr"
CHECKS = {
    "norm": "norm is sys.modules['scipy.stats'].norm",
    "config": "CONFIG is sys.modules['helpermod'].CONFIG",
    "log": "log is logging.getLogger('corpus.logger')",
    "q": "q",
}


def test_module_objects_are_the_modules_own_after_a_restore(tmp_path: Path) -> None:
    pytest.importorskip("scipy")
    (tmp_path / "helpermod.py").write_text(HELPER)
    first = run_process(tmp_path, [IMPORTS, FIT, READ], CHECKS)
    second = run_process(tmp_path, [IMPORTS, FIT, READ], CHECKS)
    statuses = [c["stderr"] for c in second["cells"]]
    assert all("restored" in s for s in statuses), statuses
    assert second["eval"] == first["eval"]
    assert second["eval"]["norm"] == second["eval"]["config"] == second["eval"]["log"] == "True"


def test_module_objects_are_keyed_by_reference() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    import numpy as np

    assert modrefs.lookup(scipy_stats.norm) == ("scipy.stats", "norm")
    before = fingerprint(scipy_stats.norm)
    scipy_stats.norm.rvs(size=3, random_state=np.random.default_rng(0))  # touches caches
    assert fingerprint(scipy_stats.norm) == before
    assert modrefs.lookup(3) is None and modrefs.lookup("norm") is None


MODEL = """%%checkpoint model
import numpy as np
rng = np.random.RandomState(42)
def model(x):
    return x + rng.randn(len(x))
"""
PREDICT = "%%checkpoint predict\nxfit = np.linspace(0, 1, 5)\nyfit = model(xfit)"
NEXT = "after = rng.randn(3).tolist()"


def test_a_generator_advanced_inside_a_function_is_restored(tmp_path: Path) -> None:
    first = run_process(tmp_path, [MODEL, PREDICT, NEXT], {"after": "after", "y": "yfit.tolist()"})
    second = run_process(tmp_path, [MODEL, PREDICT, NEXT], {"after": "after", "y": "yfit.tolist()"})
    statuses = [c["stderr"] for c in second["cells"][:2]]
    assert all("restored" in s for s in statuses), statuses
    assert second["eval"] == first["eval"]


def test_the_notebook_namespace_is_never_a_module_to_import_from() -> None:
    # multiprocessing registers __main__ again as "__mp_main__": the notebook's own values
    # must not be taken for module objects (they would be "restored" by importing __main__).
    import sys
    import types

    class Box:
        pass

    main = sys.modules["__main__"]
    box = Box()
    box.__class__.__module__ = "somewhere"  # not a __main__ class, as library objects are
    alias = types.ModuleType("__main__")
    alias.box_marker = box  # type: ignore[attr-defined]
    sys.modules["__mp_main__"] = alias
    try:
        assert modrefs.lookup(box) is None
    finally:
        sys.modules.pop("__mp_main__", None)
    assert main is sys.modules["__main__"]


EDITED_IMPORT = "%%checkpoint imp\nimport sys\nsys.path.insert(0, '.')\nimport editmod\nthing = editmod.Thing(3)"
EDITED_USES = {
    "module": "%%checkpoint use\nv = editmod.VALUE",
    "instance": "%%checkpoint use\nv = thing.scaled()",
}


@pytest.mark.parametrize("through", sorted(EDITED_USES))
def test_editing_a_helper_module_reruns_its_users_even_when_the_import_was_restored(
    tmp_path: Path, through: str
) -> None:
    # The import cell restores (its module comes back by reference, now the edited one);
    # the cell reading the module, or an object of its class, must not hit its old result.
    source = "VALUE = {v}\nclass Thing:\n    def __init__(self, n):\n        self.n = n\n    def scaled(self):\n        return self.n * {v}\n"
    (tmp_path / "editmod.py").write_text(source.format(v=1))
    cells = [EDITED_IMPORT, EDITED_USES[through]]
    first = run_process(tmp_path, cells, {"v": "v"})
    assert first["eval"]["v"] == ("1" if through == "module" else "3")
    (tmp_path / "editmod.py").write_text("# edited\n" + source.format(v=100))
    second = run_process(tmp_path, cells, {"v": "v"})
    assert "restored 'imp'" in second["cells"][0]["stderr"], second["cells"][0]
    assert "executed 'use'" in second["cells"][1]["stderr"], second["cells"][1]
    assert second["eval"]["v"] == ("100" if through == "module" else "300")


def test_a_module_that_cannot_be_imported_any_more_is_said_once(tmp_path: Path) -> None:
    (tmp_path / "gonemod.py").write_text("VALUE = 1\n")
    cell = "%%checkpoint imp --explain\nimport sys\nsys.path.insert(0, '.')\nimport gonemod"
    run_process(tmp_path, [cell], {})
    (tmp_path / "gonemod.py").unlink()
    second = run_process(tmp_path, [cell], {})
    lines = [x for x in second["cells"][0]["stderr"].splitlines() if x.startswith("ipy_resume:")]
    assert len(lines) == 1, lines  # what failed, and that the cell executes: one line
    assert "could not be rebuilt" in lines[0] and "execute again" in lines[0]
    assert "incomplete" not in second["cells"][0]["stderr"]
    assert "ModuleNotFoundError" in str(second["cells"][0]["error"])


@pytest.mark.parametrize("where", ["versioned-package", "imported-in-the-cell"])
def test_a_helpers_source_keys_the_cell_however_it_is_imported(tmp_path: Path, where: str) -> None:
    # mglearn says __version__ = "0.2.0" whatever is edited in it; a cell that imports its
    # helper itself reads no name holding it: both used to restore the old result
    package = tmp_path / "vpkg"
    package.mkdir()
    (package / "__init__.py").write_text('__version__ = "0.2.0"\nfrom .core import f\n')
    if where == "versioned-package":
        cells = [
            "%%checkpoint imp\nimport sys\nsys.path.insert(0, '.')\nimport vpkg",
            "%%checkpoint use\nv = vpkg.f()",
        ]
    else:
        cells = [
            "import sys\nsys.path.insert(0, '.')",
            "%%checkpoint use\nimport vpkg as vp\nv = vp.f()",
        ]
    for value, expected in ((1, "executed"), (1, "restored"), (2, "executed")):
        (package / "core.py").write_text(f"def f():\n    return {value}\n")
        report = run_process(tmp_path, cells, {"v": "v"})
        assert f"{expected} 'use'" in report["cells"][1]["stderr"], (value, report["cells"][1])
        assert report["eval"]["v"] == str(value)


def test_a_helper_edited_under_a_running_kernel_does_not_poison_the_next_one(
    tmp_path: Path,
) -> None:
    # The kernel keeps running the helper's old code until it is reloaded: what it computes
    # then must not be found by a kernel that runs the new code.
    (tmp_path / "edited.py").write_text("def h():\n    return 1\n")
    setup = "import sys\nsys.path.insert(0, '.')\nimport edited"
    use = "%%checkpoint use\nz = edited.h()"
    edit = "open('edited.py', 'w').write('def h():\\n    return 2000\\n')"
    first = run_process(tmp_path, [setup, use, edit, use], {"z": "z"})
    assert first["eval"]["z"] == "1"  # (the kernel's code is the old one)
    assert "restored 'use'" in first["cells"][3]["stderr"], first["cells"][3]
    fresh = run_process(tmp_path, [setup, use], {"z": "z"})
    assert "executed 'use'" in fresh["cells"][1]["stderr"], fresh["cells"][1]
    assert fresh["eval"]["z"] == "2000"
    reloaded = run_process(
        tmp_path, [setup, use, "import importlib\nimportlib.reload(edited)", use], {"z": "z"}
    )
    assert reloaded["eval"]["z"] == "2000"


def test_what_is_tied_to_code_and_what_round_trips_as_a_value(tmp_path: Path) -> None:
    import importlib
    import json
    import sys

    from ipy_resume.fingerprint import tied_to_code

    (tmp_path / "tiedmod.py").write_text("class Thing:\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        tiedmod = importlib.import_module("tiedmod")
        notebook_class = type("Notebook", (), {"__module__": "__main__"})
        assert tied_to_code(json) and tied_to_code(json.dumps) and tied_to_code(tiedmod.Thing())
        # a notebook's own objects are values: their restored fingerprints may be aliased
        assert not tied_to_code(notebook_class()) and not tied_to_code({"a": [1]})
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tiedmod", None)


INDEXED_MODULE = """
import types, warnings

class Thing:
    pass

class Proxy:
    # reading __class__ warns, as a deprecated library alias does
    @property
    def __class__(self):
        warnings.warn("Proxy is deprecated", FutureWarning, stacklevel=2)
        return types.FunctionType

thing = Thing()
proxy = Proxy()
"""
INDEX_SOON = """
import os, sys, threading, time, warnings
sys.path.insert(0, sys.argv[1])
from ipy_resume.runtime import modrefs
warnings.simplefilter("error")  # any warning the index lets out fails this process
threading.excepthook = lambda args: os._exit(5)  # (one the helper thread meets too)
modrefs.lookup(os)  # (what is imported so far: indexed)
import heldmod
# while a cell runs the helper waits, and a lookup indexes what is left itself
modrefs.hold_off()
waiting = threading.Thread(target=modrefs._index_on_helper, daemon=True)
waiting.start()
time.sleep(0.3)
print(waiting.is_alive(), "heldmod" in modrefs._seen, modrefs.lookup(heldmod.thing))
modrefs.index_soon()  # (the cell ended)
waiting.join(30)
print(waiting.is_alive())
import types
import indexedmod

class Noisy(types.ModuleType):
    # a lazy module's kind: reading its namespace runs its code (here, a warning)
    def __getattribute__(self, attr):
        if attr == "__dict__":
            warnings.warn("loaded on first use", ImportWarning)
        return super().__getattribute__(attr)

noisy = Noisy("noisymod")
noisy.thing = noisy_thing = indexedmod.Thing()
sys.modules["noisymod"] = noisy
modrefs.index_soon()
helper = modrefs._helper
assert helper is not None
assert modrefs._done.wait(30)  # (the pass is over; the thread waits for the next)
assert helper.is_alive()
modrefs.index_soon()  # (the same thread makes the next pass)
assert modrefs._done.wait(30) and modrefs._helper is helper
assert [o for _, _, o in modrefs._deferred] == [indexedmod.proxy], modrefs._deferred
assert "noisymod" not in modrefs._seen  # (left to the lookup below)
print(modrefs.lookup(indexedmod.thing), modrefs.lookup(indexedmod.proxy), not modrefs._deferred,
      modrefs.lookup(noisy_thing))
# a fork while the index is held (as by a helper mid-index) leaves the child a working index
import forkedmod
modrefs._lock.acquire()
pid = os.fork()
if pid == 0:
    os._exit(0 if modrefs.lookup(forkedmod.thing) == ("forkedmod", "thing") else 3)
modrefs._lock.release()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_modules_a_cell_imported_are_indexed_between_cells_as_a_lookup_would(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    (tmp_path / "indexedmod.py").write_text(INDEXED_MODULE)
    (tmp_path / "forkedmod.py").write_text(INDEXED_MODULE)
    (tmp_path / "heldmod.py").write_text("class Thing:\n    pass\n\nthing = Thing()\n")
    script = tmp_path / "soon.py"
    script.write_text(INDEX_SOON)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    # the proxy was left to the lookup (which asks its class quietly): not a module object
    assert out.stdout.split("\n")[:4] == [
        "True False ('heldmod', 'thing')",
        "False",
        "('indexedmod', 'thing') None True ('noisymod', 'thing')",
        "child 0",
    ]
