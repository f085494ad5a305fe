"""One PEFT LoRA round trip for every model family (used by the families' `test_lora_*` tests): the peft wrapper a
user gets from `get_peft_model`, its outputs at initialisation (LoRA's B is zero: the model's own), one `Trainer` step
that moves the adapters and every `modules_to_save` copy, `save_pretrained` of the adapter and
`PeftModel.from_pretrained` on a fresh model (the trained outputs), `merge_and_unload()` (the same outputs without
peft) and the merged model saved and loaded through its auto class with `trust_remote_code=True`."""

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import Trainer, TrainingArguments


def lora_round_trip(build, lora_config: LoraConfig, inputs: dict, rows: list, auto_class, tmp_path, output="logits",
                    trainer_class=Trainer, args_class=TrainingArguments, data_collator=None):
    """Run the round trip and return `(peft_model, merged)`: the trained wrapper and the merged model loaded back
    (both in eval mode, the same weights). `build()` gives the same model every call (seeded); `inputs` are the
    family's real inputs, compared on the `output` field; `rows` are `Trainer` rows (tensors or lists, or the features
    `data_collator` batches), two per step, and every key of their batch must reach the model through the wrapper."""
    base = build().eval()
    with torch.no_grad():
        expected = getattr(base(**inputs), output)
    peft_model = get_peft_model(build(), lora_config).eval()
    with torch.no_grad():
        torch.testing.assert_close(getattr(peft_model(**inputs), output), expected)  # B = 0: the model's own

    lora_b = {name: p.detach().clone() for name, p in peft_model.named_parameters() if "lora_B" in name}
    assert lora_b
    # each `modules_to_save` name wraps a module (peft skips a name that matches none without a word) whose copy
    # the step must move, so that saving, reloading and merging it are checked below
    copies = {name: p.detach().clone() for name, p in peft_model.named_parameters() if ".modules_to_save." in name}
    for wanted in lora_config.modules_to_save or ():
        assert any(name.split(".modules_to_save.")[0].endswith(wanted) for name in copies), wanted
    args = args_class(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2, use_cpu=True,
                      report_to="none", save_strategy="no", learning_rate=1e-2,
                      remove_unused_columns=data_collator is None)
    received = []
    hook = peft_model.get_base_model().register_forward_pre_hook(
        lambda module, positional, kwargs: received.append({key for key, value in kwargs.items() if value is not None}),
        with_kwargs=True)
    result = trainer_class(model=peft_model.train(), args=args, train_dataset=rows, data_collator=data_collator).train()
    hook.remove()
    assert result.global_step == 1
    batch_keys = set(rows[0]) if data_collator is None else set(data_collator(rows[:2]))
    assert received and batch_keys <= received[0], batch_keys - received[0]  # nothing dropped on the way
    moved = dict(peft_model.named_parameters())
    assert all(not torch.equal(moved[name], before) for name, before in lora_b.items())
    for wrapper in {name.split(".modules_to_save.")[0] for name in copies}:
        assert any(not torch.equal(moved[name], before) for name, before in copies.items()
                   if name.startswith(wrapper + ".modules_to_save.")), wrapper
    peft_model.eval()
    with torch.no_grad():
        trained = getattr(peft_model(**inputs), output)
    assert not torch.allclose(trained, expected)  # the step reaches the outputs, so the checks below can fail

    peft_model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(build(), tmp_path / "adapter").eval()
    assert type(reloaded) is type(peft_model)
    with torch.no_grad():
        torch.testing.assert_close(getattr(reloaded(**inputs), output), trained)
    merged = reloaded.merge_and_unload()
    assert type(merged) is type(base) and not hasattr(merged, "peft_config")
    merged.save_pretrained(tmp_path / "merged")
    loaded = auto_class.from_pretrained(tmp_path / "merged", trust_remote_code=True).eval()
    assert type(loaded).__name__ == type(base).__name__
    with torch.no_grad():
        for model in (merged, loaded):
            torch.testing.assert_close(getattr(model(**inputs), output), trained, atol=1e-5, rtol=1e-4)
    return peft_model, loaded
