#!/usr/bin/python3
"""`trainer report` through the real binary, on a supervised run of two
launches (rank 1 crashes at step 25; the supervisor restarts it from the
step-20 checkpoint), with a NaN update skipped, validation every 10 steps,
checkpoints every 10 and a rank slowed into a straggler (faults act in the
first launch):

- the numbers the page shows equal what this script computes from
  metrics.jsonl and events.jsonl itself: the summary table (last step, final,
  lowest and validation loss, median tokens/s, MFU and step time, launches,
  restarts, checkpoints, skips, stragglers), every point of the line charts
  (read back from the drawn SVG coordinates through the axis mapping each
  chart carries), the step-time breakdown, the memory table (measured peaks
  from metrics.jsonl, the plan as `trainer plan` prints it for the run's
  resolved recipe) and the events on the time axis;
- a run still going (metrics.jsonl ending in half a line, the supervisor's
  events stopping at the first launch, a fresh heartbeat) is reported as
  running, up to its last complete step;
- headless Chromium (Debian's, installed by scripts/setup.sh test) renders
  the page: in the rendered DOM every chart's SVG has drawn series paths and
  bars (non-zero length and box, from the browser's own layout), and a PNG
  screenshot is not blank and shows the series colours;
- errors: not a run directory, an unwritable output (exit 2).

usage: report_check.py TRAINER MPIEXEC
"""
import html.parser
import json
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DEMO_RECIPE, check, finish, run  # noqa: E402

CHARTS = ["loss_step", "loss_tokens", "lr", "grad_norm", "tokens_per_s", "mfu", "step_time", "memory", "timeline"]
MEM = ["params", "grads", "optimizer", "activations", "comm", "temporaries"]


class Page(html.parser.HTMLParser):
    """The charts (attributes, series paths, bars, markers) and tables (id ->
    rows of cell texts) of a report page."""

    def __init__(self, text):
        super().__init__()
        self.svgs, self.tables, self._svg, self._table, self._cell = {}, {}, None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "chart" in a.get("class", ""):
            self._svg = self.svgs[a["id"]] = {"attrs": a, "paths": {}, "bars": [], "markers": []}
        elif self._svg is not None and tag == "path" and a.get("class") == "series":
            self._svg["paths"][a["data-series"]] = a["d"]
        elif self._svg is not None and tag == "rect" and a.get("class") == "bar":
            self._svg["bars"].append(a)
        elif self._svg is not None and tag == "g" and a.get("class") == "marker":
            self._svg["markers"].append(a["data-event"])
        elif tag == "table":
            self._table = self.tables[a.get("id")] = []
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def table(self, name):
        """row label -> the rest of the row."""
        return {r[0]: r[1:] for r in self.tables[name]}

    def points(self, chart, series):
        """The data values of a series, from its drawn coordinates."""
        a = {k: float(v) for k, v in self.svgs[chart]["attrs"].items() if k[5:] in
             ("x0", "x1", "y0", "y1", "px0", "px1", "py0", "py1")}
        out = []
        for px, py in re.findall(r"(-?[\d.]+),(-?[\d.]+)", self.svgs[chart]["paths"][series]):
            x = a["data-x0"] + (float(px) - a["data-px0"]) / (a["data-px1"] - a["data-px0"]) * (a["data-x1"] - a["data-x0"])
            y = a["data-y0"] + (float(py) - a["data-py0"]) / (a["data-py1"] - a["data-py0"]) * (a["data-y1"] - a["data-y0"])
            out.append((x, y))
        # Half of the 0.01 px the coordinates are rounded to, in data units.
        tol = (0.006 * abs(a["data-x1"] - a["data-x0"]) / abs(a["data-px1"] - a["data-px0"]),
               0.006 * abs(a["data-y1"] - a["data-y0"]) / abs(a["data-py1"] - a["data-py0"]))
        return out, tol


def close(shown, want, rel=6e-4):
    """A number as the page shows it (4 significant digits) against its value."""
    try:
        v = float(re.sub(r"[^\d.eE+-]", "", shown.split()[0]))
    except (ValueError, IndexError):
        return False
    return abs(v - want) <= rel * max(abs(want), 1e-12)


def median(v):
    return statistics.median(v)


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA PNG."""
    data = open(path, "rb").read()
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


# Runs in a copy of the page only: the report itself has no scripts. Reports
# what the browser laid out for each chart.
PROBE = """<script>
const out = {};
for (const svg of document.querySelectorAll("svg.chart")) {
  const paths = [...svg.querySelectorAll("path.series")].map(p => [p.getTotalLength(), p.getBBox().width, p.getBBox().height]);
  const bars = [...svg.querySelectorAll("rect.bar")].map(r => r.getBBox().width * r.getBBox().height);
  const box = svg.getBoundingClientRect();
  out[svg.id] = {paths, bars, width: box.width, height: box.height};
}
const pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def check_numbers(page, recs, events, plan_mb, tokens_per_step):
    by = {}
    for r in recs:
        by[r["step"]] = r  # the newest record of a step (a relaunch logs steps again)
    steps = sorted(by)
    last = by[steps[-1]]
    after1 = [by[s] for s in steps if s != 1]
    s = page.table("summary")
    val = [by[k]["val_loss"] for k in steps if "val_loss" in by[k]]
    ckpts = sum("ckpt_ms" in r for r in recs)
    want = {"last step": steps[-1], "final train loss": last["loss"],
            "lowest train loss": min(by[k]["loss"] for k in steps), "final val loss": val[-1],
            "median tokens/s (logged steps after the first)": median([r["tokens_per_s"] for r in after1]),
            "median MFU": 100 * median([r["mfu"] for r in after1]),
            "median step time": median([r["step_ms"] for r in after1]),
            "tokens trained": steps[-1] * tokens_per_step / 1e3,
            "launches": sum(e["event"] == "start" for e in events),
            "restarts": sum(e["event"] == "restart" for e in events), "checkpoints saved": ckpts,
            "updates skipped (NaN or spike)": sum("update_skipped" in r for r in recs),
            "straggler reports": sum("stragglers" in r for r in recs)}
    bad = {k: (s.get(k), v) for k, v in want.items() if k not in s or not close(s[k][0], v)}
    check(not bad, f"summary table: {len(want)} numbers equal metrics.jsonl/events.jsonl ({bad})")
    check(s["state"][0] == "finished", f"summary: state finished ({s['state']})")

    # Every plotted point, read back from the SVG.
    series = {("loss_step", "train loss"): [(k, by[k]["loss"]) for k in steps],
              ("loss_step", "val loss"): [(k, by[k]["val_loss"]) for k in steps if "val_loss" in by[k]],
              ("loss_tokens", "train loss"): [(k * tokens_per_step, by[k]["loss"]) for k in steps],
              ("lr", "Learning rate"): [(k, by[k]["lr"]) for k in steps],
              ("grad_norm", "Gradient norm (before clipping)"): [(k, by[k]["grad_norm"]) for k in steps],
              ("tokens_per_s", "Tokens per second"): [(k, by[k]["tokens_per_s"]) for k in steps],
              ("mfu", "Model FLOPs utilisation"): [(k, 100 * by[k]["mfu"]) for k in steps]}
    for (chart, name), want_pts in series.items():
        want_pts = [p for p in want_pts if p[1] is not None and math.isfinite(p[1])]  # NaN (null): a gap
        got, (tx, ty) = page.points(chart, name)
        ok = len(got) == len(want_pts) and all(abs(g[0] - w[0]) <= tx and abs(g[1] - w[1]) <= ty
                                               for g, w in zip(got, want_pts))
        check(ok, f"chart {chart}: '{name}' draws the {len(want_pts)} logged values (got {len(got)} points)")

    # Step-time breakdown, from the definition the page states.
    def parts(r):
        comm = sum(r[f"comm_{g}_{k}_ms"] for g in ("dp", "tp", "pp") for k in ("allreduce", "allgather", "reduce_scatter")
                   if not (g == "dp" and "comm_dp_exposed_ms" in r)) + r.get("comm_dp_exposed_ms", 0.0) \
            + r.get("comm_cp_exposed_ms", 0.0)
        bubble = r["pp_wait_ms"][0]
        return [max(0.0, r["step_ms"] - comm - bubble - r["data_wait_ms"]), comm, bubble, r["data_wait_ms"],
                r.get("ckpt_ms", 0.0)]
    means = [sum(parts(by[k])[i] for k in steps) / len(steps) for i in range(5)]
    b = page.table("breakdown")
    names = ["compute", "communication", "pipeline bubble", "data wait", "checkpoint"]
    bad = {n: (b[n][0], m) for n, m in zip(names, means) if not close(b[n][0], m)}
    check(not bad and means[1] > 0 and means[2] > 0 and means[4] > 0,
          f"step-time table: mean compute/communication/bubble/data/checkpoint ms equal metrics.jsonl ({bad})")
    bars = page.svgs["step_time"]["bars"]
    check({x["data-category"] for x in bars} == set(names) and
          len({x["data-x"] for x in bars}) == len(steps), f"step-time chart: one bar per logged step, every part drawn")

    m = page.table("memory")
    measured = {k: max(by[s][f"mem_peak_{k}_mb"] for s in steps) for k in MEM}
    # `trainer plan` prints MB with one decimal.
    bad = {k: (m[k], measured[k], plan_mb[k]) for k in MEM
           if not close(m[k][0], measured[k]) or abs(float(m[k][1]) - plan_mb[k]) > 0.0501}
    check(not bad, f"memory table: measured peaks equal metrics.jsonl, plan equals `trainer plan` ({bad})")

    kinds = [r[2] for r in page.tables["events"][1:]]
    want_kinds = {"start": 2, "exit": 1, "restart": 1, "done": 1, "checkpoint": ckpts, "skip": 1}
    check(all(kinds.count(k) == n for k, n in want_kinds.items()) and kinds.count("straggler") >= 1,
          f"events table: {want_kinds} and stragglers ({ {k: kinds.count(k) for k in set(kinds)} })")
    markers = page.svgs["timeline"]["markers"]
    check(markers.count("start") == 2 and markers.count("restart") == 1 and markers.count("checkpoint") == ckpts
          and markers.count("skip") == 1, f"timeline: launches, the restart, checkpoints and the skip are marked")


def plan_for(trainer, recipe):
    """Stage 0's predicted MB per category for the recipe's mode (the row marked *)."""
    _, out = run([trainer, "plan", recipe])
    for line in out.splitlines():
        f = line.split()
        if len(f) > 8 and f[0] == "0" and f[1].endswith("*"):
            return dict(zip(MEM, map(float, f[2:8])))
    raise SystemExit("no stage-0 row in trainer plan's output:\n" + out)


def check_browser(chrome, report, tmp):
    probe = os.path.join(tmp, "probe.html")
    open(probe, "w").write(open(report).read().replace("</body>", PROBE + "</body>"))
    args = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1340,3600"]
    p = subprocess.run(args + ["--dump-dom", "file://" + probe], capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="probe">(.*?)</pre>', p.stdout, re.S)
    if not check(m is not None, "headless Chromium loads the page and runs the probe"):
        print(p.stdout[-2000:], p.stderr[-2000:])
        return
    drawn = json.loads(html.unescape(m.group(1)))
    for c in CHARTS:
        d = drawn.get(c, {})
        paths_ok = all(length > 0 and w > 0 for length, w, h in d.get("paths", []))
        n = len(d.get("paths", [])) + len(d.get("bars", []))
        check(n > 0 and paths_ok and all(a > 0 for a in d.get("bars", [])) and d.get("width", 0) > 100,
              f"rendered DOM: chart {c} laid out {d.get('width')}x{d.get('height')} px with "
              f"{len(d.get('paths', []))} non-empty series path(s) and {len(d.get('bars', []))} bar(s)")
    png = os.path.join(tmp, "report.png")
    subprocess.run(args + ["--screenshot=" + png, "file://" + os.path.abspath(report)], capture_output=True, timeout=120)
    if not check(os.path.exists(png), "headless Chromium writes a screenshot"):
        return
    w, h, rows = png_pixels(png)
    pixels = [px for row in rows[::2] for px in row[::2]]
    ink = sum(px != (255, 255, 255) for px in pixels) / len(pixels)
    near = lambda px, c: all(abs(a - b) <= 24 for a, b in zip(px, c))  # noqa: E731
    blue = sum(near(px, (0x1f, 0x77, 0xb4)) for px in pixels)
    red = sum(near(px, (0xd6, 0x27, 0x28)) for px in pixels)
    check(ink > 0.03 and blue > 300 and red > 100,
          f"screenshot {w}x{h}: not blank ({100 * ink:.1f}% of pixels drawn), series blue in {blue} and "
          f"communication red in {red} sampled pixels")


def main():
    trainer, _ = sys.argv[1], sys.argv[2]
    chrome = browser()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses", "--output", data],
                       check=True, stdout=subprocess.DEVNULL)
        rdir = os.path.join(tmp, "run")
        sets = {"data.train": f'["{data}/train_*.bin"]', "data.val": f'["{data}/val_*.bin"]', "training.steps": 40,
                "training.log_every": 2, "training.eval_every": 10, "training.eval_batches": 2,
                "model.n_layers": 2, "checkpoint.every": 10, "launch.ranks": 4, "parallel.dp": 1,
                "parallel.pp": 2, "parallel.tp": 2, "supervisor.backoff": 0.5, "run.dir": rdir,
                "runtime.peak_gflops": 100, "training.on_nan": '"skip"', "runtime.straggler_every": 2,
                "fault.inject": '["crash rank=1 step=25", "nan step=15", "slow rank=3 ms=300 step=16"]'}
        args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
        run([trainer, "supervise", DEMO_RECIPE, *args])
        t0 = time.time()
        code, out = run([trainer, "report", rdir])
        report = os.path.join(rdir, "report.html")
        check(code == 0 and f"report: {report}" in out and os.path.exists(report),
              f"trainer report writes RUN_DIR/report.html in {time.time() - t0:.2f} s: {out.strip()}")
        text = open(report).read()
        check("<script" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
              and "https://" not in text, "the page has no scripts and loads nothing from the network")
        page = Page(text)
        check(set(CHARTS) <= set(page.svgs), f"charts {CHARTS} present (got {sorted(page.svgs)})")
        recs = [json.loads(l) for l in open(os.path.join(rdir, "metrics.jsonl"))]
        events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
        launches = [json.loads(l) for l in open(os.path.join(rdir, "launches.jsonl"))]
        check([l["first_step"] for l in launches] == [0, 20] and all(l["trainer"] and l["git"] for l in launches),
              f"launches.jsonl: one record per launch, from steps 0 and 20, with versions")
        check(len(page.tables["launches"]) == 3, "launches table: both launches with their versions")
        tokens_per_step = 16 * 128  # configs/demo.toml: global_batch 16, seq_len 128
        check_numbers(page, recs, events, plan_for(trainer, os.path.join(rdir, "recipe.resolved.toml")),
                      tokens_per_step)

        # Hostile values in every field of every input file: nothing reaches the page as markup.
        evil = '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&'
        hostile = os.path.join(tmp, "hostile")
        shutil.copytree(rdir, hostile, ignore=shutil.ignore_patterns("checkpoints", "report.html"))

        def poison(name, keys_too):
            out = []
            for line in open(os.path.join(rdir, name)):
                r = json.loads(line)
                r = {k: (v if k in ("step", "time") and name == "metrics.jsonl" else evil) for k, v in r.items()}
                if keys_too:
                    r["val_loss/" + evil] = 1.0
                    r[evil] = evil
                out.append(json.dumps(r))
            open(os.path.join(hostile, name), "w").write("\n".join(out) + "\n")
        poison("launches.jsonl", True)
        poison("events.jsonl", True)
        ms = [json.loads(l) for l in open(os.path.join(rdir, "metrics.jsonl"))]
        with open(os.path.join(hostile, "metrics.jsonl"), "w") as f:
            for r in ms:
                r["stragglers"] = evil
                r["val_loss/" + evil] = r.get("loss", 1.0)
                f.write(json.dumps(r) + "\n")
        with open(os.path.join(hostile, "events.jsonl"), "a") as f:
            f.write("{not json\n[1, 2]\n")
        code, out = run([trainer, "status", hostile])
        check(code == 0 and "2 damaged or partial line(s)" in out and "supervisor:" in out,
              f"trainer status on the same files: exit {code}, damaged lines skipped and counted")
        if code != 0:
            print(out[-1500:])
        code, out = run([trainer, "report", hostile, "--output", os.path.join(tmp, "hostile.html")])
        text = open(os.path.join(tmp, "hostile.html")).read() if code == 0 else ""
        check(code == 0 and "<script" not in text and "<img" not in text and "onerror=alert" not in text.replace(
              "onerror=alert(2)&gt;", "") and "&lt;script&gt;" in text,
              f"hostile values in every field of launches, events and metrics: the page shows them as text (exit {code})")

        # A run still going: half a line at the end, the first launch's events only.
        live = os.path.join(tmp, "live")
        shutil.copytree(rdir, live, ignore=shutil.ignore_patterns("checkpoints", "report.html"))
        lines = open(os.path.join(rdir, "metrics.jsonl")).read().splitlines(True)
        open(os.path.join(live, "metrics.jsonl"), "w").write("".join(lines[:8]) + lines[8][:40])
        open(os.path.join(live, "events.jsonl"), "w").write(open(os.path.join(rdir, "events.jsonl")).readline())
        os.utime(os.path.join(live, "heartbeat"))
        out_file = os.path.join(tmp, "live.html")
        code, _ = run([trainer, "report", live, "--output", out_file])
        live_page = Page(open(out_file).read())
        s = live_page.table("summary")
        last_step = json.loads(lines[7])["step"]
        check(code == 0 and s["state"][0].startswith("running") and s["last step"][0].startswith(f"{last_step} of 40")
              and s["lines skipped (being written, or damaged)"][0] == "1",
              f"a run still going: {s['state'][0]}, last step {s['last step'][0]}, the half line skipped")

        code, out = run([trainer, "report", os.path.join(tmp, "data")], ok_codes=(2,))
        check("not a run directory" in out, "report on a directory without run files: exit 2, says why")
        code, out = run([trainer, "report", rdir, "--output", "/nonexistent/dir/r.html"], ok_codes=(2,))
        check("cannot write the report" in out, "report to an unwritable path: exit 2, says why")

        if check(chrome is not None, "Chromium is installed (scripts/setup.sh test installs Debian's)"):
            check_browser(chrome, report, tmp)
    finish("report")


if __name__ == "__main__":
    main()
