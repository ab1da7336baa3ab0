"""`punctual forecast`: the chart and `--json`, against a fake API."""

from __future__ import annotations

from typing import Any

from tests.cli.fakes import FakeApi, problem, run


def body(*dues: int) -> dict[str, Any]:
    minutes = [
        {"minute": f"2026-12-01T12:{i:02d}:00Z", "due": d, "peak_second": d // 2, "by_tenant": {"me": d} if d else {}}
        for i, d in enumerate(dues)
    ]
    peak = max(range(len(dues)), key=lambda i: dues[i])
    return {
        "start": minutes[0]["minute"],
        "minutes": minutes,
        "total": sum(dues),
        "peak_minute": minutes[peak]["minute"] if sum(dues) else None,
        "peak_due": dues[peak],
        "timers_read": 7,
    }


def test_the_chart_has_a_bar_per_minute_scaled_to_the_busiest(no_network: None) -> None:
    api = FakeApi({"GET /v1/forecast": (200, body(0, 10, 50_000, 1))})
    result = run("forecast", "--minutes", "4", client=api.client())
    assert result.code == 0, result.err
    assert api.sent()[2] == {"minutes": ["4"]}
    lines = result.out.splitlines()
    assert lines[1].startswith("2026-12-01 12:00") and "#" not in lines[1]
    assert lines[3].count("#") == 50 and "50,000" in lines[3]
    assert lines[2].count("#") == 1 and lines[4].count("#") == 1  # small but not zero: still visible
    assert "50,011 due in 4 minutes; busiest minute 2026-12-01 12:02 with 50,000" in result.out


def test_json_is_the_api_document(no_network: None) -> None:
    document = body(3, 0)
    api = FakeApi({"GET /v1/forecast": (200, document)})
    result = run("forecast", "--json", client=api.client())
    assert result.code == 0 and result.json() == document
    assert api.sent()[2] == {"minutes": ["60"]}


def test_a_refused_window_is_reported_with_the_apis_detail(no_network: None) -> None:
    api = FakeApi(
        {"GET /v1/forecast": problem(422, "Unprocessable Content", "query parameter 'minutes' must be 1-180")}
    )
    result = run("forecast", "--minutes", "500", client=api.client())
    assert result.code != 0 and "minutes" in result.err
