"""Tests of the lab (``lab/specops_lab``)."""
