#!/usr/bin/env python3
"""bench_nodes.py — `make bench-nodes`: chapter 09 measured on 2 emulated nodes x 2 ranks
(common/scripts/cluster.sh; root only: elsewhere it says why and writes nothing), at each
inter-node link rate of --links (Mbit/s each way, tc tbf):

  1. ch09_nodes, the flat ring against the two-level all-reduce (--impl ring, 1 MiB .. 16 MiB):
     time, busbw beside the link, inter-node bytes per rank measured beside the formula, and the
     bytes each node's eth0 really sent; the program's whole --json is kept.
  2. step time of the strategies on the default MLP, --reps runs each, the strategies alternating
     (and their order reversed every rep): DDP (ch02 bucketed), ZeRO-3 over all 4 ranks, HSDP
     (ch05 --shard-group node), ZeRO++ hpZ (ch05 --hpz), TP = 2 inside a node with DP across (ch06 --tp 2), and TP = 2
     across the nodes (the same, ranks placed round-robin: mpirun --map-by node). Per run: the
     median step, and the bytes per step per rank that crossed nodes (DP and TP groups) beside
     the formula, from the run's --json.

Prints the tables and writes --out (JSON with _meta: commands, machine, date, load before and
after). Timings on a shared 2-core box are noisy: compare the strategies within one link rate."""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time

STRATS = [  # name, program, flags, extra environment
    ("ddp", "ch02_ddp", ["--variant", "bucketed"], {}),
    ("zero3", "ch05_zero3", [], {}),
    ("hsdp", "ch05_zero3", ["--shard-group", "node"], {}),
    ("hpz", "ch05_zero3", ["--hpz"], {}),
    ("tp2_in_node", "ch06_tp", ["--tp", "2"], {}),
    ("tp2_across_nodes", "ch06_tp", ["--tp", "2"], {"ZL_MPIRUN_FLAGS": "--map-by node"}),
]


def zlrun(binary, args, link, env_extra, timeout=300):
    env = dict(os.environ, **env_extra)
    cmd = ["bash", "common/scripts/zlrun", "--nodes", "2", "--link-mbit", str(link), "4", binary] + args
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, timeout=timeout)
    return " ".join(("%s=%s " % (k, v) for k, v in env_extra.items())) + "common/scripts/zlrun " + " ".join(cmd[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--links", default="100,400")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    check = subprocess.run(["bash", "common/scripts/cluster.sh", "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print("bench-nodes: skipped: emulated nodes cannot be made here: " + check.stdout.strip())
        return 0
    os.environ.setdefault("ZL_CLUSTER", "zlb")
    os.environ.setdefault("ZL_CLUSTER_SUBNET", "10.213.7")
    links = [int(x) for x in a.links.split(",")]
    load0 = os.getloadavg()
    res = {"_meta": {"command": "make bench-nodes LINKS=%s ZL_BENCH_REPS=%d (common/scripts/bench_nodes.py %s)" % (a.links, a.reps, " ".join(sys.argv[1:])), "machine": platform.node() + " %d cores" %
                     os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_before": load0,
                     "reps": a.reps, "steps": a.steps, "layout": "2 emulated nodes x 2 ranks (network namespaces, tc htb token bucket per direction)",
                     "model": "default MLP of the chapters (--input 32 --hidden 128 --layers 3 --classes 10, batch 240), fp32"},
           "allreduce": {}, "steps": {}}
    subprocess.run(["bash", "common/scripts/cluster.sh", "up", "2", "--ttl", "1800"], check=True, stdout=subprocess.DEVNULL)
    try:
        for link in links:
            fd, path = tempfile.mkstemp(suffix=".json")
            os.close(fd)
            cmd = zlrun(os.path.join(a.bin, "ch09_nodes"), ["-b", "1M", "-e", "16M", "-f", "4", "-n", "3", "-w", "1",
                                                            "--impl", "ring", "--json", path], link, {})
            with open(path) as f:
                d = json.load(f)
            os.unlink(path)
            d["command"] = cmd
            res["allreduce"][str(link)] = d
            print("\nall-reduce across 2 nodes x 2 ranks, link %d Mbit/s (%.1f MB/s each way), --impl ring:" % (link, link / 8))
            print("%-10s %-10s %9s %10s %7s %14s %14s %14s" % ("bytes", "algorithm", "time ms", "busbw MB/s", "/link",
                                                              "inter B/rank", "formula", "eth0 tx/node"))
            for r in d["results"]:
                print("%-10d %-10s %9.1f %10.1f %7.2f %14.0f %14.0f %14.0f" % (
                    r["bytes"], r["algorithm"], r["time_us"] / 1000, r["busbw_mbs"], r["busbw_over_link"] or 0,
                    max(r["inter_node_bytes_per_rank"]), max(r["formula_inter_node_bytes_per_rank"]),
                    max(r["wire_tx_bytes_per_node"] or [0])))
            sys.stdout.flush()
        for link in links:
            raw = {s[0]: [] for s in STRATS}
            cmds = {}
            for rep in range(a.reps):
                order = STRATS if rep % 2 == 0 else STRATS[::-1]
                for name, prog, flags, env in order:
                    fd, path = tempfile.mkstemp(suffix=".json")
                    os.close(fd)
                    cmds[name] = zlrun(os.path.join(a.bin, prog), flags + ["--steps", str(a.steps), "--quiet", "--json",
                                                                          path], link, env)
                    with open(path) as f:
                        d = json.load(f)
                    os.unlink(path)
                    nodes = d["nodes"]
                    tp_inter = statistics.mean(r["tp_inter_bytes_per_step"] for r in nodes["per_rank"])
                    raw[name].append({"ms": d["median_step_ms"], "inter": nodes["inter_bytes_per_step_per_rank"],
                                      "inter_formula": nodes["formula_inter_bytes_per_step_per_rank"], "tp_inter": tp_inter,
                                      "sent": d["comm"]["bytes_per_step_per_rank"], "loss": d["final_loss"]})
                print("link %d: rep %d/%d done (load %.2f)" % (link, rep + 1, a.reps, os.getloadavg()[0]), file=sys.stderr)
            out = {}
            print("\nstep time on 2 nodes x 2 ranks, link %d Mbit/s: median of %d runs (alternating), %d steps each" %
                  (link, a.reps, a.steps))
            print("%-18s %9s %12s %14s %14s %14s" % ("strategy", "step ms", "runs (ms)", "DP across B", "formula",
                                                      "TP across B"))
            for name, *_ in STRATS:
                rs = raw[name]
                med = statistics.median(r["ms"] for r in rs)
                out[name] = {"median_step_ms": med, "runs_ms": [r["ms"] for r in rs], "command": cmds[name],
                             "inter_bytes_per_step_per_rank": rs[0]["inter"],
                             "formula_inter_bytes_per_step_per_rank": rs[0]["inter_formula"],
                             "tp_inter_bytes_per_step_per_rank": rs[0]["tp_inter"],
                             "bytes_per_step_per_rank": rs[0]["sent"], "final_loss": rs[0]["loss"]}
                print("%-18s %9.2f %12s %14.0f %14.0f %14.0f" % (name, med, "/".join("%.1f" % r["ms"] for r in rs),
                                                                 rs[0]["inter"], rs[0]["inter_formula"], rs[0]["tp_inter"]))
            res["steps"][str(link)] = out
            sys.stdout.flush()
    finally:
        subprocess.run(["bash", "common/scripts/cluster.sh", "down"], stdout=subprocess.DEVNULL)
    res["_meta"]["load_after"] = os.getloadavg()
    print("\nload %.2f -> %.2f; JSON: %s" % (load0[0], res["_meta"]["load_after"][0], a.out))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
