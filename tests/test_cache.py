"""The cache folder (caldera.cache)."""

from pathlib import Path

from caldera.cache import cache_dir


def test_the_environment_variable_wins_and_a_tilde_is_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CALDERA_CACHE", "~/elsewhere")
    assert cache_dir() == tmp_path / "elsewhere"


def test_without_it_the_cache_is_under_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("CALDERA_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == Path(tmp_path) / ".cache" / "caldera"
