#!/usr/bin/env bash
# One prepared GPU check of `reproduce` (issue 39, item 5). From the repository root on a
# CUDA machine (the device image lacks open_clip: see gpu_hpe_check.sh for the wheels):
#   OUT=DIR PYTHONUNBUFFERED=1 bash benchmarks/gpu_reproduce_check.sh
# It writes a synthetic EuroSAT in its official layout at 256 px (nothing is downloaded),
# then runs `reproduce fewtrans:table-5 --limit 2` for three families (linear probe, full
# fine-tuning, LoRA) on a random-init ViT-B/16 at 224 px (timm, in place of CLIP's visual
# encoder: the same architecture and cost) under the paper's HPE grid (fewtrans-paper,
# default centres: --skip-search), and prints, per family, the measured seconds per
# episode next to what the cost table (fewtrans_board/reproduce/costs.toml) projects for
# the same episodes on an H200. Those measured figures replace the estimates in the cost
# table. Budget: about 8 minutes on one H200 (a timeout stops it at 480 s).
set -u
OUT="${OUT:-.}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
DATA="$(mktemp -d)"
python3 - "$DATA" <<'PY'
import sys
from pathlib import Path
from fewtrans_board.datasets.synthetic import write_synthetic_copy
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
write_synthetic_copy(registry.datasets.get("eurosat").obj, Path(sys.argv[1]) / "eurosat",
                     per_class=60, image_size=256)
PY
timeout 480 python3 -m fewtrans_board reproduce fewtrans:table-5 --limit 2 --skip-search \
  --swap-model clip-vit-b16.openai=timm:vit_base_patch16_224.random \
  --root "eurosat=$DATA/eurosat" --dataset eurosat --row Linear --row Finetune --row LoRA \
  --device cuda --work "$OUT/gpu-table-5" --json > "$OUT/gpu_reproduce_report.json"
echo "reproduce exit status: $?"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fewtrans_board.reproduce.costs import estimate_run
from fewtrans_board.reproduce.planner import _grid_size
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.results.row_schema import CONFIG_KIND
out = Path(sys.argv[1]) / "gpu-table-5"
manifest = Manifest.load(out / "manifests" / "fewtrans-varied--eurosat.parquet").episodes()[:2]
support = sum(len(e.support) for e in manifest) / len(manifest)
rows = []
for adapter, folder in (("linear-probe", "linear"), ("finetune", "finetune"), ("lora", "lora")):
    run = out / "runs" / folder / "fewtrans-varied--eurosat"
    seconds = 0.0
    for shard in (run / "shards").glob("*.parquet"):
        table = pq.read_table(shard, columns=["kind", "seconds"])
        seconds += float(pc.sum(table.filter(pc.equal(table["kind"], CONFIG_KIND))["seconds"]).as_py() or 0)
    configurations, epochs = _grid_size("fewtrans-paper", adapter)
    projected = estimate_run(model="vit_base_patch16", adapter=adapter, configurations=configurations,
                             epochs_total=epochs, episodes=1, support=support).seconds
    rows.append({"adapter": adapter, "support": support, "measured_s_per_episode": round(seconds / 2, 1),
                 "cost_table_s_per_episode": round(projected, 1)})
print(json.dumps(rows, indent=2))
(Path(sys.argv[1]) / "gpu_reproduce_costs.json").write_text(json.dumps(rows, indent=2))
PY
