"""Test set-up shared by every test: headless Qt, cached bytecode, no test touches the user's
settings, and no test leaves a run's private directory behind in the temp folder."""

from __future__ import annotations

import os
import sys
import time

import pytest
from temp_dirs import private_dirs

# Must be set before any Qt import: tests run without a display (CI, this machine).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def pytest_configure(config) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # Bytecode is cached, by this process and by the ones the tests start, even where the
    # environment sets PYTHONDONTWRITEBYTECODE: without it every xdist worker rewrites and
    # compiles all the test modules again at collection, and every window and runner process
    # compiles gpuwatch again. The cache lands in ``__pycache__`` folders, which git ignores.
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture(scope="session", autouse=True)
def torch_on_the_runners_threads():
    """Torch in the test process computes on as many threads as a runner on this machine would
    (``configure_threads``: half the cores). Torch's default, one thread per core, makes every
    parallel op wait for its slowest thread: beside one other busy process on 2 cores that is
    several times slower, for no test's benefit. Session-wide, so that module fixtures (a
    reference run) compute on the same threads as the tests comparing with them; torch is
    never imported here (the collected test modules did, or it stays out)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        from gpuwatch.runner.session import configure_threads

        configure_threads(torch, torch.device("cpu"))
    yield


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Every test gets its own settings and log folders: none reads or writes the user's."""
    base = tmp_path_factory.mktemp("user-dirs")
    monkeypatch.setenv("GPUWATCH_SETTINGS_DIR", str(base / "settings"))
    monkeypatch.setenv("GPUWATCH_LOG_DIR", str(base / "logs"))
    return base


#: A run's private directory goes when its runner has ended; that can take a few seconds after
#: a test is done with it (the stop escalates on a loaded machine).
PRIVATE_DIR_GONE_S = 30.0


@pytest.fixture(autouse=True)
def no_private_dir_left():
    """A test that starts a run must end it: its private directory (link socket, source copy)
    is gone afterwards, whether the test passed or failed."""
    before = private_dirs()
    yield
    deadline = time.monotonic() + PRIVATE_DIR_GONE_S
    while (left := private_dirs() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"the test left private directories behind: {sorted(map(str, left))}"


def pytest_sessionfinish(session, exitstatus) -> None:
    """A run that collected no test is a failure, not a pass (pytest exits 5)."""
    if exitstatus == 5:
        session.exitstatus = 1


@pytest.fixture
def show_window(qtbot):
    """Factory: a shown 1280×800 MainWindow over ``session``, closed (run stopped) afterwards."""
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    windows = []

    def show(session):
        win = MainWindow(session, WindowOptions(workload="vision", device="cpu"))
        qtbot.addWidget(win)
        win.resize(1280, 800)
        win.show()
        qtbot.waitExposed(win)
        windows.append(win)
        return win

    yield show
    for win in windows:
        win.close()


@pytest.fixture
def light(qapp):
    """The shared application's theme manager, in light; left in light afterwards."""
    from gpuwatch.qt.theme import theme_manager

    manager = theme_manager(qapp)
    manager.set_mode("light")
    yield manager
    manager.set_mode("light")
