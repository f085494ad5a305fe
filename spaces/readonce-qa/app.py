"""Read once, answer many: a Gradio demo of hf-readonce's DeFormer question answering.

Pick one of the packaged example passages (Disfl-QA validation, see `examples.json`) or paste a document, ask several
questions (one per line), and compare two ways of answering them with the same model, the reference DeFormer that
ships with hf-readonce (`hf_readonce.weights.reference_deformer_path()`):

* cached: one call of the `question-answering` pipeline for all questions; the passage states (the output of the
  decomposed lower layers) are computed once and paired with every question;
* every pair: one call per question, so the passage is read again with each question.

Both give the same answers; the difference is the time. Input errors (an empty document or question list, a document
or a question list too long) are shown as a message, never as a traceback.

Run it with `python spaces/readonce-qa/app.py` (`pip install "hf-readonce[space]"`); it listens on
`GRADIO_SERVER_NAME:GRADIO_SERVER_PORT` (default 127.0.0.1:7860).
"""

from __future__ import annotations

import functools
import html
import json
import logging
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = json.loads((HERE / "examples.json").read_text(encoding="utf-8"))["examples"]
PASTE = "(paste your own document)"
MAX_DOCUMENT_TOKENS = 2048
MAX_QUESTIONS = 16
MAX_QUESTION_CHARS = 500

logger = logging.getLogger("readonce-qa")


class InputError(ValueError):
    """A problem with what the user typed; its message is shown in the app as it is."""


@functools.lru_cache(maxsize=1)
def load_pipeline():
    """The DeFormer `question-answering` pipeline over hf-readonce's shipped reference checkpoint, computing in the
    dtype of hf-readonce's one rule (`hf_readonce.dtypes`: float32 on a CPU, though the checkpoint is saved in fp16).

    Returns:
        `DeformerQuestionAnsweringPipeline`: with the checkpoint's recorded windows and no-answer threshold, run once
        on a short example (warm-up, so the first timed request does not include one-time costs).

    Raises:
        FileNotFoundError: if hf-readonce is installed without its reference checkpoint.
    """
    from transformers import AutoTokenizer

    from hf_readonce.models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline
    from hf_readonce.representations import DeformerBertAdapter
    from hf_readonce.weights import load_quietly, reference_deformer_path

    path = reference_deformer_path()
    model = load_quietly(DeformerBertAdapter.load_for_compute, path, device="cpu")
    pipe = DeformerQuestionAnsweringPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(path))
    # warm-up, both ways, so that the first timed click does not pay for one-time set-up in either column
    for questions in (["Who wrote it?", "When?"], ["Who wrote it?"]):
        pipe(question=questions, context="Emma is a novel by Jane Austen, published in 1815.")
    return pipe


def parse_questions(text) -> list[str]:
    """The questions of a text box, one per non-blank line.

    Args:
        text (`str` or `None`): what the user typed.

    Returns:
        `list[str]`: the stripped, non-empty lines.

    Raises:
        InputError: if there is no question, more than `MAX_QUESTIONS`, or one longer than `MAX_QUESTION_CHARS`.
    """
    questions = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not questions:
        raise InputError("Type at least one question (one per line).")
    if len(questions) > MAX_QUESTIONS:
        raise InputError(f"You asked {len(questions)} questions; this demo answers at most {MAX_QUESTIONS} at once.")
    for number, question in enumerate(questions, 1):
        if len(question) > MAX_QUESTION_CHARS:
            raise InputError(f"Question {number} has {len(question)} characters; at most {MAX_QUESTION_CHARS}.")
    return questions


def check_document(document, tokenizer) -> str:
    """The document, stripped, if the demo can read it.

    Args:
        document (`str` or `None`): the text of the document box.
        tokenizer: the model's tokenizer (the length limit is in its tokens).

    Returns:
        `str`: the stripped document.

    Raises:
        InputError: if the document is empty or longer than `MAX_DOCUMENT_TOKENS` tokens.
    """
    document = (document or "").strip()
    if not document:
        raise InputError("The document is empty: pick an example or paste a document.")
    n = len(tokenizer(document, add_special_tokens=False)["input_ids"])
    if n > MAX_DOCUMENT_TOKENS:
        raise InputError(f"The document has {n:,} tokens; this demo reads at most {MAX_DOCUMENT_TOKENS:,}. "
                         "Shorten it and try again.")
    return document


def answer(document, questions_text, pipe=None) -> dict:
    """Answer every question about `document` twice: once from cached passage states (one pipeline call), once
    reading every question + passage pair (one call per question).

    Args:
        document (`str`): the document.
        questions_text (`str`): questions, one per line.
        pipe (*optional*): a DeFormer question-answering pipeline (default: [`load_pipeline`]).

    Returns:
        `dict`: `questions`, `answers` (the pipeline's dicts, cached path), `same` (whether every pair's answer was
        the same), `cached_seconds`, `pairs_seconds`, `gold` (the data set's answer of each question that is one
        of a packaged example's, else None).

    Raises:
        InputError: see [`parse_questions`] and [`check_document`].
    """
    pipe = pipe if pipe is not None else load_pipeline()
    questions = parse_questions(questions_text)
    document = check_document(document, pipe.tokenizer)
    start = time.perf_counter()
    cached = pipe(question=questions, context=document)
    cached_seconds = time.perf_counter() - start
    cached = [cached] if isinstance(cached, dict) else cached
    start = time.perf_counter()
    pairs = [pipe(question=[question], context=document)[0] for question in questions]
    pairs_seconds = time.perf_counter() - start
    same = [a["answer"] for a in cached] == [a["answer"] for a in pairs]
    known = {(e["context"].strip(), q): a for e in EXAMPLES for q, a in zip(e["questions"], e["answers"])}
    return {"questions": questions, "answers": cached, "same": same, "cached_seconds": cached_seconds,
            "pairs_seconds": pairs_seconds, "gold": [known.get((document, q)) for q in questions]}


def render(result: dict) -> tuple[str, str]:
    """The answers table and the timing line (Markdown) of an [`answer`] result."""
    gold = result.get("gold") or [None] * len(result["questions"])
    rows = ["| # | question | answer | score | data set's answer |", "|---|---|---|---|---|"]
    for number, (question, item, expected) in enumerate(zip(result["questions"], result["answers"], gold), 1):
        text = _cell(item["answer"]) if item["answer"] else "*(no answer)*"
        rows.append(f"| {number} | {_cell(question)} | {text} | {item['score']:.3f} | "
                    f"{_cell(expected) if expected else ''} |")
    n, cached, pairs = len(result["questions"]), result["cached_seconds"], result["pairs_seconds"]
    timing = (f"**{n} question(s)**: {cached * 1000:.0f} ms with the passage read once and its states cached, "
              f"{pairs * 1000:.0f} ms reading every question + passage pair "
              f"(**{pairs / max(cached, 1e-9):.2f}x**). "
              + ("Both ways gave the same answers." if result["same"] else
                 "The two ways gave different answers (this should not happen; please report it)."))
    return "\n".join(rows), timing


def _cell(text: str) -> str:
    return html.escape(text, quote=False).replace("|", "&#124;")


def run(document, questions_text, pipe=None) -> tuple[str, str, str]:
    """The app's handler: `(status, answers, timing)` Markdown, a message instead of a traceback on any error."""
    try:
        answers, timing = render(answer(document, questions_text, pipe))
        return "", answers, timing
    except InputError as error:
        return f"⚠️ {error}", "", ""
    except Exception as error:  # never a traceback in the page; the log keeps it
        logger.exception("answering failed")
        return f"⚠️ Something went wrong: {type(error).__name__}: {error}", "", ""


def pick_example(name: str) -> tuple[str, str]:
    """The document and questions of the example called `name` (empty boxes for the paste option)."""
    for example in EXAMPLES:
        if example["name"] == name:
            return example["context"], "\n".join(example["questions"])
    return "", ""


def document_edited(document: str) -> str:
    """The example choice once the user has typed in the document box: the example's name while the text is still
    that example's passage, else the paste option (so the dropdown never names a passage that is not shown)."""
    for example in EXAMPLES:
        if example["context"] == document:
            return example["name"]
    return PASTE


def build_demo():
    """The Gradio Blocks app (not launched)."""
    import gradio as gr

    first = EXAMPLES[0]
    with gr.Blocks(title="Read once, answer many (hf-readonce DeFormer)") as demo:
        gr.Markdown("# Read once, answer many\nA DeFormer (hf-readonce's reference MiniLM checkpoint, k = 3 of 6 "
                    "layers) reads the passage once and answers every question from its cached passage states. "
                    "The same questions are then answered reading every question + passage pair, for the time "
                    "against it. Example passages: Disfl-QA validation (CC BY 4.0; passages from SQuAD 2.0 / "
                    "Wikipedia, CC BY-SA 4.0).")
        choice = gr.Dropdown([e["name"] for e in EXAMPLES] + [PASTE], value=first["name"], label="Example",
                             elem_id="example")
        document = gr.Textbox(first["context"], lines=8, label="Document", elem_id="document")
        questions = gr.Textbox("\n".join(first["questions"]), lines=4, label="Questions (one per line)",
                               elem_id="questions")
        button = gr.Button("Answer", variant="primary", elem_id="answer-button")
        status = gr.Markdown(elem_id="status")
        answers = gr.Markdown(elem_id="answers")
        timing = gr.Markdown(elem_id="timing")
        # `.input` events fire on what the user does, not on values set by another event: picking an example fills
        # the boxes, typing a passage sets the choice to the paste option (without emptying the boxes)
        choice.input(pick_example, choice, [document, questions])
        document.input(document_edited, document, choice)
        button.click(lambda d, q: run(d, q), [document, questions], [status, answers, timing])
    return demo


if __name__ == "__main__":
    import os

    logging.basicConfig(level=logging.INFO)
    load_pipeline()  # load before the first click
    build_demo().launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
