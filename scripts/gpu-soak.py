#!/usr/bin/env python3
"""Soak test for a GPU machine: device memory while streams come and go.

Starts `vigil run` with the given config (its API and metrics listeners must
be set), adds --base looped real-time copies of --clip through the API,
then every --period seconds removes --churn of the running streams and adds
as many new ones, for --minutes. Every --sample seconds it prints one line:
each GPU's used memory (nvidia-smi), vigil's resident memory, and the
decoded, processed and dropped frames per second since the last line, and
the frames published over their latency budget ("late", from
vigil_budget_misses_total), from vigil's /metrics, counted over the
streams that ran through the whole interval (so a little under the total
while streams churn). At the end it compares the first sample taken after
--settle seconds with the last one and prints the growth.

It removes the streams it added before it stops vigil, so the registry
in vigil's data_dir is left as it was (use a config with its own data_dir
to keep the soak apart from a real deployment). Standard library only, so
it runs on the H200 machine's python3 and on Debian's. Exit status: 0, or 1 if vigil died or a request failed.

usage: gpu-soak.py --vigil BIN --config FILE --clip FILE [--model NAME]
                   [--base 40] [--churn 4] [--period 20] [--minutes 10]
                   [--sample 30] [--settle 60]
"""
import argparse
import json
import random
import re
import subprocess
import sys
import time
import urllib.request


def by_stream(text, name):
    """Sums of counter name per stream label."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            m = re.search(r'stream="([^"]*)"', line)
            key = m.group(1) if m else ""
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def rate(cur, last, dt):
    """Per-second increase over the streams present in both samples: vigil
    forgets a removed stream's series, so plain sums would fall."""
    return sum(cur[k] - last[k] for k in cur if k in last) / dt


def gpu_mem_mib():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        return [int(x) for x in out.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) // 1024 if m else 0


def request(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vigil", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--clip", required=True)
    ap.add_argument("--model", default="yolox-nano")
    ap.add_argument("--api", default="http://127.0.0.1:8080")
    ap.add_argument("--metrics", default="http://127.0.0.1:9090/metrics")
    ap.add_argument("--base", type=int, default=40)
    ap.add_argument("--churn", type=int, default=4)
    ap.add_argument("--period", type=float, default=20)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--sample", type=float, default=30)
    ap.add_argument("--settle", type=float, default=60)
    ap.add_argument("--log", default="soak-vigil.log")
    a = ap.parse_args()

    log = open(a.log, "w")
    proc = subprocess.Popen([a.vigil, "run", "--config", a.config], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            request("GET", a.api + "/v1/streams")
            break
        except OSError:
            if proc.poll() is not None:
                print(f"vigil exited with {proc.returncode} before its API answered (see {a.log})")
                return 1
            time.sleep(0.1)
    serial = 0
    running = []

    def add():
        nonlocal serial
        sid = f"soak{serial}"
        serial += 1
        request("POST", a.api + "/v1/streams",
                {"id": sid, "url": a.clip, "model": a.model, "realtime": True, "loop": True})
        running.append(sid)

    rng = random.Random(1)
    status = 0
    try:
        for _ in range(a.base):
            add()
        t0 = time.time()
        next_churn, next_sample = t0 + a.period, t0
        last = None
        settled = None
        sample = None
        added = removed = 0
        print(f"{'t s':>6} {'streams':>7} {'GPU MiB':>16} {'RSS MiB':>8} {'decoded/s':>10} {'processed/s':>11} {'dropped/s':>9} {'late/s':>7}", flush=True)
        while time.time() - t0 < a.minutes * 60:
            if proc.poll() is not None:
                print(f"vigil exited with {proc.returncode} (see {a.log})")
                return 1
            now = time.time()
            if now >= next_churn:
                for sid in rng.sample(running, min(a.churn, len(running))):
                    request("DELETE", a.api + "/v1/streams/" + sid)
                    running.remove(sid)
                    removed += 1
                for _ in range(a.churn):
                    add()
                    added += 1
                next_churn += a.period
            if now >= next_sample:
                text = urllib.request.urlopen(a.metrics, timeout=30).read().decode()
                cur = (now, by_stream(text, "vigil_frames_decoded_total"), by_stream(text, "vigil_frames_processed_total"),
                       by_stream(text, "vigil_frames_dropped_total"), by_stream(text, "vigil_budget_misses_total"))
                rates = ["", "", "", ""]
                if last:
                    dt = cur[0] - last[0]
                    rates = [f"{rate(cur[i], last[i], dt):.0f}" for i in (1, 2, 3, 4)]
                last = cur
                sample = (now - t0, gpu_mem_mib(), rss_mib(proc.pid))
                if settled is None and now - t0 >= a.settle:
                    settled = sample
                print(f"{now - t0:6.0f} {len(running):7d} {str(sample[1]):>16} {sample[2]:8d} {rates[0]:>10} {rates[1]:>11} {rates[2]:>9} {rates[3]:>7}", flush=True)
                next_sample += a.sample
            time.sleep(0.2)
        print(f"streams added {a.base + added}, removed {removed}, over {a.minutes:g} min")
        if settled and sample:
            g = [b - s for s, b in zip(settled[1], sample[1])]
            print(f"growth from t={settled[0]:.0f} s to t={sample[0]:.0f} s: GPU memory {g} MiB, vigil RSS {sample[2] - settled[2]} MiB")
    except OSError as e:
        print(f"request failed: {e}")
        status = 1
    finally:
        # Leave vigil's registry (its data_dir) as it was: remove the
        # streams this run added.
        for sid in list(running):
            try:
                request("DELETE", a.api + "/v1/streams/" + sid)
            except OSError:
                pass
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return status


if __name__ == "__main__":
    sys.exit(main())
