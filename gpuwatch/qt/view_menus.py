"""View → Panels and View → Theme: the submenus the action table places in the View menu."""

from __future__ import annotations

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QDockWidget, QMainWindow, QMenu

from gpuwatch.qt.settings import Settings
from gpuwatch.qt.theme import MODES, theme_manager


def panels_menu(window: QMainWindow) -> QMenu:
    """Show or hide each of the window's docks (those it has when this is called)."""
    panels = QMenu("Panels", window)
    for dock in window.findChildren(QDockWidget):
        panels.addAction(dock.toggleViewAction())
    return panels


class ThemeMenu(QMenu):
    """One checked entry per theme mode; follows the theme manager, whoever changes it."""

    def __init__(self, window: QMainWindow, settings: Settings) -> None:
        super().__init__("Theme", window)
        self.settings = settings
        group = QActionGroup(self)
        manager = theme_manager()
        self.mode_actions: dict[str, QAction] = {}
        for mode in MODES:
            action = self.addAction(mode.capitalize())
            action.setCheckable(True)
            action.setChecked(mode == manager.mode)
            action.triggered.connect(lambda _=False, m=mode: self.choose(m))
            group.addAction(action)
            self.mode_actions[mode] = action
        manager.sig_theme_changed.connect(self._sync)

    def choose(self, mode: str) -> None:
        """Apply ``mode`` and remember it for the next start."""
        theme_manager().set_mode(mode)
        self.settings.theme = mode

    def _sync(self, *_: object) -> None:
        mode = theme_manager().mode
        for name, action in self.mode_actions.items():
            action.setChecked(name == mode)
