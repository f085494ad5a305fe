"""Adding a model family is one folder and one file: a copy of the package gets a toy family, `models/toy_bert/`
(configuration, modeling, pipeline) and `representations/toy_bert.py` (its adapter and `register_family(...)`), and
nothing else changes. In a fresh process on that copy the family is registered with `AutoConfig`/`AutoModel`,
published with a generated card, loaded through its pipeline with `trust_remote_code=True`, listed by
`hf-readonce info`, and encoded into a store by `hf-readonce encode` with its own command-line option."""

import filecmp
import json
import os
import shutil
import subprocess
import sys
import textwrap

from tests.conftest import REPO_ROOT

CONFIGURATION = '''
from transformers import PretrainedConfig


class ToyBertConfig(PretrainedConfig):
    model_type = "toy_bert"

    def __init__(self, vocab_size=30522, hidden_size=8, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        super().__init__(**kwargs)
'''

MODELING = '''
import hashlib

import torch
from transformers import PreTrainedModel

from .configuration_toy_bert import ToyBertConfig


class ToyBertModel(PreTrainedModel):
    config_class = ToyBertConfig

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None):
        return self.embeddings(input_ids)

    def representation_fingerprint(self) -> str:
        return hashlib.sha256(self.embeddings.weight.detach().numpy().tobytes()).hexdigest()


ToyBertConfig.register_for_auto_class()
ToyBertModel.register_for_auto_class("AutoModel")
'''

PIPELINE = '''
import torch
from transformers import AutoModel
from transformers.pipelines import PIPELINE_REGISTRY, Pipeline


class ToyEncodingPipeline(Pipeline):
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(self, **kwargs):
        return {}, {}, {}

    def preprocess(self, text):
        return self.tokenizer(text, return_tensors="pt")

    def _forward(self, inputs):
        return {"states": self.model(inputs["input_ids"])}

    def postprocess(self, outputs):
        return {"tokens": int(outputs["states"].shape[1]), "norm": float(outputs["states"].norm())}


PIPELINE_REGISTRY.register_pipeline("toy-encoding", pipeline_class=ToyEncodingPipeline, pt_model=AutoModel,
                                    type="text")
'''

ADAPTER = '''
import torch

from ..models.toy_bert.configuration_toy_bert import ToyBertConfig
from ..models.toy_bert.modeling_toy_bert import ToyBertModel
from ..models.toy_bert.pipeline_toy_bert import ToyEncodingPipeline
from .base import AdapterBase, pad_rows, tokenizer_fingerprint
from .registry import CardText, register_family


class ToyBertAdapter(AdapterBase):
    model_type = "toy_bert"
    representation = "toy_embeddings/v1"
    checkpoint_model_types = ("toy_bert",)
    cli_settings = {"max_toy_length": ("--max-toy-length", 16, "tokens read per document")}

    def __init__(self, model, tokenizer, max_toy_length=16, batch_size=8):
        self.model, self.tokenizer, self.max_toy_length, self.batch_size = model, tokenizer, max_toy_length, batch_size

    @classmethod
    def load_model(cls, name_or_path, **kwargs):
        return ToyBertModel.from_pretrained(name_or_path, **kwargs)

    def fingerprint(self):
        return self.model.representation_fingerprint()

    def settings(self):
        return {"representation": self.representation, "max_toy_length": self.max_toy_length,
                "tokenizer": tokenizer_fingerprint(self.tokenizer)}

    @torch.no_grad()
    def encode(self, texts):
        out = []
        for text in texts:
            ids = self.tokenizer(text, truncation=True, max_length=self.max_toy_length, return_tensors="pt").input_ids
            out.append({"states": self.model(ids)[0].float(), "num_tokens": torch.tensor([ids.shape[1]])})
        return out

    def num_tokens(self, tensors):
        return int(tensors["num_tokens"][0])

    def read(self, stored, *, device=None, dtype=None):
        return pad_rows([t["states"] for t in stored], device=device, dtype=dtype)


__all__ = ["ToyBertAdapter"]

register_family(
    name="toy_bert",
    configs=(ToyBertConfig,),
    auto_models={"AutoModel": ToyBertModel},
    auto_class="AutoModel",
    pipelines={"toy-encoding": ToyEncodingPipeline},
    adapter=ToyBertAdapter,
    cards={"toy_bert": CardText(
        tag="toy-embeddings", title="Toy embeddings", paper="Nobody et al., 2026, \\"A Toy Family\\"",
        paragraphs=("Each token is read once, alone, into its embedding.",), pipeline_tag="feature-extraction",
        usage="```python\\nmodel = AutoModel.from_pretrained(\\"{repo_id}\\"{trust})\\n```")},
)
'''

SCRIPT = '''
import io, json, sys
from contextlib import redirect_stdout
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoTokenizer, pipeline

import hf_readonce
from hf_readonce.cli import main as cli
from hf_readonce.hub.publish import publish
from hf_readonce.representations import registered_families
from hf_readonce.weights import minilm_path

root = Path(sys.argv[1])
assert hf_readonce.__file__.startswith(str(root)), hf_readonce.__file__
result = {"families": sorted(registered_families())}
config = AutoConfig.for_model("toy_bert", hidden_size=4)
result["auto_config"] = type(config).__name__
model = AutoModel.from_config(config)
result["auto_model"] = type(model).__name__
result["exported"] = hasattr(hf_readonce, "ToyBertModel") and hasattr(hf_readonce, "ToyBertConfig")

torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(minilm_path())
model.save_pretrained(root / "checkpoint")
tokenizer.save_pretrained(root / "checkpoint")
published = publish(root / "checkpoint", "someone/toy-bert", local_dir=root / "published")
result["files"] = published.files
result["card"] = (root / "published" / "README.md").read_text()
result["custom_pipelines"] = json.loads((root / "published" / "config.json").read_text())["custom_pipelines"]

pipe = pipeline("toy-encoding", model=str(root / "published"), trust_remote_code=True)
result["pipeline_class"] = type(pipe).__module__ + "." + type(pipe).__name__
result["pipeline_output"] = pipe("Emma is a novel by Jane Austen.")

for name, argv in (("info", ["info"]), ("info_json", ["info", "--json"])):
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli(argv) == 0
    result[name] = out.getvalue()
out = io.StringIO()
with redirect_stdout(out):
    try:
        cli(["encode", "--help"])
    except SystemExit:
        pass
result["encode_help"] = out.getvalue()
(root / "docs.jsonl").write_text(json.dumps({"id": "a", "context": "Emma is a novel by Jane Austen."}) + "\\n")
out = io.StringIO()
with redirect_stdout(out):
    result["encode_status"] = cli(["encode", str(root / "published"), "--documents", str(root / "docs.jsonl"),
                                   "--store", str(root / "store"), "--max-toy-length", "5", "--no-progress",
                                   "--device", "cpu"])
out = io.StringIO()
with redirect_stdout(out):
    assert cli(["info", "--store", str(root / "store"), "--json"]) == 0
result["store"] = json.loads(out.getvalue())
json.dump(result, open(root / "result.json", "w"))
'''


def test_a_new_family_is_one_folder_and_one_file(tmp_path):
    package = tmp_path / "pkg" / "hf_readonce"
    shutil.copytree(REPO_ROOT / "src" / "hf_readonce", package, ignore=shutil.ignore_patterns("__pycache__"))
    added = {"models/toy_bert/configuration_toy_bert.py": CONFIGURATION,
             "models/toy_bert/modeling_toy_bert.py": MODELING, "models/toy_bert/pipeline_toy_bert.py": PIPELINE,
             "representations/toy_bert.py": ADAPTER}
    for relative, text in added.items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(textwrap.dedent(text).lstrip())
    # the copy differs from the package by the toy's folder and file only
    comparison = filecmp.dircmp(REPO_ROOT / "src" / "hf_readonce", package, ignore=["__pycache__"])
    assert not comparison.diff_files and not comparison.left_only
    assert comparison.right_only == [] and set(comparison.subdirs) >= {"models", "representations"}
    assert comparison.subdirs["models"].right_only == ["toy_bert"]
    assert comparison.subdirs["representations"].right_only == ["toy_bert.py"]
    assert not comparison.subdirs["models"].diff_files and not comparison.subdirs["representations"].diff_files

    env = dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), HF_HUB_OFFLINE="1",
               HF_MODULES_CACHE=str(tmp_path / "modules"))
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())

    assert "toy_bert" in result["families"] and "deformer_bert" in result["families"]
    assert result["auto_config"] == "ToyBertConfig" and result["auto_model"] == "ToyBertModel" and result["exported"]
    assert {"config.json", "model.safetensors", "modeling_toy_bert.py", "configuration_toy_bert.py",
            "pipeline_toy_bert.py", "README.md", "tokenizer.json"} <= set(result["files"])
    assert result["custom_pipelines"] == {"toy-encoding": {"impl": "pipeline_toy_bert.ToyEncodingPipeline",
                                                           "pt": ["AutoModel"], "type": "text"}}
    card = result["card"]
    assert "pipeline_tag: feature-extraction" in card and "- toy-embeddings" in card
    assert "## Method: Toy embeddings" in card and "Paper: Nobody et al., 2026" in card
    assert 'AutoModel.from_pretrained("someone/toy-bert", trust_remote_code=True)' in card
    assert result["pipeline_class"].startswith("transformers_modules.")
    assert result["pipeline_class"].endswith("pipeline_toy_bert.ToyEncodingPipeline")
    assert result["pipeline_output"]["tokens"] == 10 and result["pipeline_output"]["norm"] > 0
    assert "family toy_bert: model types toy_bert" in result["info"]
    assert ("--max-toy-length (encode, publish; default: the value the checkpoint records, else 16): "
            "tokens read per document") \
        in result["info"]
    assert "--max-toy-length" in result["encode_help"] and "toy_bert: tokens read per document" in result["encode_help"]
    toy = next(row for row in json.loads(result["info_json"]) if row["family"] == "toy_bert")
    assert toy["pipelines"] == {"toy-encoding": "ToyEncodingPipeline"} and toy["encode"] and toy["answer"] is None
    assert result["encode_status"] == 0
    (space,) = result["store"]["spaces"].values()
    assert space["model_type"] == "toy_bert" and space["documents"] == 1
    assert space["settings"]["max_toy_length"] == 5  # the family's own option, through the CLI
