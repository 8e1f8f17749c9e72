"""Widgets of the dashboard: launch-side pickers (choice lists, profiles,
preflight) and run-dashboard panels.

Each module is imported directly (`from vega_tui.widgets.profile_list import ProfileList`); this
package imports nothing so that opening one screen never pays for another screen's widgets.
"""
