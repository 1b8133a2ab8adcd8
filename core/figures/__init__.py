"""Plotly figure builders, one module per view."""
