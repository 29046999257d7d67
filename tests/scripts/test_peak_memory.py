"""diffrec_bench.peak_memory without a GPU: the allocator trace is replayed to its peak, and what
is alive there is charged to the innermost line of diffrec that allocated it."""



from diffrec_bench import peak_memory

LIGHT = [{"filename": "/usr/lib/python3/site-packages/torch/sparse.py", "line": 9, "name": "mm"},
         {"filename": "/x/backend/diffrec/light/prefilter.py", "line": 40, "name": "_ggx"},
         {"filename": "/x/backend/diffrec/pipeline/run.py", "line": 7, "name": "optimize"}]
RENDER = [{"filename": "/x/backend/diffrec/render/renderer.py", "line": 88, "name": "shade"}]
SCRIPT = [{"filename": "/x/scripts/bench_passes.py", "line": 3, "name": "main"}]


def alloc(addr, mib, frames):
    return {"action": "alloc", "addr": addr, "size": mib * 2**20, "frames": frames}


def free(addr, action="free_requested"):
    return {"action": action, "addr": addr, "size": 0, "frames": []}


def test_the_blocks_alive_at_the_peak_are_charged_to_their_diffrec_lines():
    trace = [
        free(99),  # allocated before the trace began: not counted
        alloc(1, 100, LIGHT), alloc(2, 50, RENDER), alloc(3, 30, RENDER),  # 180
        free(2), free(2, "free_completed"),  # freed once: 130
        alloc(4, 60, RENDER),  # the peak: 190
        free(4), alloc(5, 50, SCRIPT),  # 180: lower
    ]
    peak, index, holders = peak_memory.holders_at_peak(trace)
    assert peak == 190 * 2**20 and index == 6
    assert holders == [("diffrec/light/prefilter.py:40 (_ggx)", 100 * 2**20, 1),
                       ("diffrec/render/renderer.py:88 (shade)", 90 * 2**20, 2)]


def test_sites_outside_diffrec_fall_back_to_the_script_then_the_innermost_frame():
    assert peak_memory.allocation_site(SCRIPT) == "scripts/bench_passes.py:3 (main)"
    bench = [{"filename": "/x/backend/diffrec_bench/passes.py", "line": 5, "name": "main"}]
    assert peak_memory.allocation_site(bench + LIGHT[:1]) == "diffrec_bench/passes.py:5 (main)"
    assert peak_memory.allocation_site(LIGHT[:1]) == (
        "/usr/lib/python3/site-packages/torch/sparse.py:9 (mm)")
    assert peak_memory.allocation_site([]) == "(no stack recorded)"


def test_the_report_lists_the_top_holders_and_sums_the_rest(tmp_path):
    trace = [alloc(i, i + 1, [{"filename": f"/b/diffrec/m{i}.py", "line": i, "name": "f"}])
             for i in range(5)]
    report = tmp_path / "memory.md"
    peak_memory.write_report(report, trace, top=2)
    text = report.read_text()
    assert "15.0 MiB allocated (event 5 of 5)" in text
    assert "| 5.0 | 1 | diffrec/m4.py:4 (f) |" in text and "| 4.0 | 1 |" in text
    assert "| 6.0 | 3 | 3 other lines |" in text


def test_an_empty_trace_says_nothing_was_recorded(tmp_path):
    report = tmp_path / "memory.md"
    peak_memory.write_report(report, [])
    assert "nothing recorded (CUDA only)" in report.read_text()
