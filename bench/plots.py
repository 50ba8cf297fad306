"""docs/img/*.png of `make bench` (bench/report.py): end-to-end times with their
spread over rounds, and per-op times of the small-op storm."""

import os

import stats


def plots(data, summary, img_dir):
    """Writes the plots; returns their file names ([] without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(img_dir, exist_ok=True)
    ran = stats.timed_contenders(data)
    names = [w["name"] for w in data["workloads"]]
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / max(1, len(ran))
    for i, c in enumerate(ran):
        med, low, high = [], [], []
        for name in names:
            s = summary[name]["contenders"].get(c["key"])
            t = s["time_s"] if s else {"median": float("nan"), "min": float("nan"), "max": float("nan")}
            med.append(t["median"] * 1e3)
            low.append((t["median"] - t["min"]) * 1e3)
            high.append((t["max"] - t["median"]) * 1e3)
        xs = [x + i * width for x in range(len(names))]
        ax.bar(xs, med, width, label=c["label"], yerr=[low, high], capsize=2)
    ax.set_xticks([x + width * (len(ran) - 1) / 2 for x in range(len(names))], names, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("ms per step: median over rounds, min-max (log)")
    ax.set_title(f"End-to-end time by workload ({data['mode']} run, {data['date'][:10]})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(img_dir, "e2e.png"), dpi=90)
    plt.close(fig)
    out = ["e2e.png"]
    storm = next((w for w in data["workloads"] if w["name"] == "small_op_storm"), None)
    if storm and storm.get("ops"):
        labels, vals = [], []
        for c in ran:
            s = summary["small_op_storm"]["contenders"].get(c["key"])
            if s:
                labels.append(c["label"])
                vals.append(s["time_s"]["median"] / storm["ops"] * 1e6)
        empty = next(
            (b for b in data.get("micro", {}).get("benchmarks", []) if b["name"] == "BM_EmptyLaunchSync"), None
        )
        if empty:
            labels.append("kiln runtime alone\n(empty launch + sync)")
            vals.append(empty["real_time"] / 1e3)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.barh(labels, vals, color="tab:orange")
        ax.set_xlabel("µs per op")
        ax.set_title("Per-op time on tiny tensors (small-op storm)")
        fig.tight_layout()
        fig.savefig(os.path.join(img_dir, "launch_overhead.png"), dpi=90)
        plt.close(fig)
        out.append("launch_overhead.png")
    return out
