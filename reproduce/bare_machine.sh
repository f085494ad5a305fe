#!/usr/bin/env bash
# Run a reproduce/ entry point on a bare GPU machine that reaches no package index or hub.
#
#   bash reproduce/bare_machine.sh CARRY_DIR python reproduce/deformer.py --ks 4 3 ...
#
# CARRY_DIR holds what the checkout lacks: wheels/*.whl (packages missing on the machine: for this image datasets,
# dill, multiprocess, tokenizers (the image has 0.23.2, which hf-readonce refuses) and safetensors (>= 0.8), made with `pip download --no-deps --only-binary=:all: --python-version 3.12 ...`),
# data.tar.gz (a tar of ../shared/data's folders the table reads) and weights/<checkpoint>/model.safetensors (or its
# parts). The wheels go to a private folder on PYTHONPATH (nothing is installed into the machine's Python), the data
# to $REPRO_DATA (default /tmp/shared/data; the entry point's --data_dir is set to it), and the weights are
# restored into checkpoints/ by the entry point itself (--weights_from), which checks their SHA-256.
# `python reproduce/carry.py --output_dir CARRY_DIR --tables <table>` builds CARRY_DIR (reproduce/README.md). With
# HF_READONCE_CHECKPOINTS set, the reference checkpoints are restored into that folder instead of checkpoints/.
set -euo pipefail
carry=$(cd "$1" && pwd); shift
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
deps=/tmp/hf-readonce-deps
if compgen -G "$carry/wheels/*.whl" > /dev/null; then
  python3 -m pip install -q --no-deps --no-index --target "$deps" "$carry"/wheels/*.whl
fi
export PYTHONPATH="$deps:$(pwd)/src${PYTHONPATH:+:$PYTHONPATH}"
data_root=${REPRO_DATA:-/tmp/shared/data}
if [ -f "$carry/data.tar.gz" ]; then
  # the tar holds data/<folder>/...: its top folder becomes $data_root, whatever that folder is named
  mkdir -p "$data_root" && tar xzf "$carry/data.tar.gz" -C "$data_root" --strip-components=1
fi
python3 - <<'PY'
import torch, transformers, datasets, tokenizers, safetensors
print(f"torch {torch.__version__} cuda {torch.cuda.is_available()} "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''}; transformers {transformers.__version__}; "
      f"datasets {datasets.__version__}; tokenizers {tokenizers.__version__}; safetensors {safetensors.__version__}",
      flush=True)
PY
exec "$@" --data_dir "$data_root" --weights_from "$carry/weights"
