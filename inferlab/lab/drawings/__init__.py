"""The one plotly drawing behind each view (issue 26): widget, view.figure() and exports."""
