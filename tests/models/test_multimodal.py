"""Image prompts on the tiny vision-language model: processor, generation, update log-probs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import torch
from PIL import Image, ImageDraw

from rla_core.config import LoraConfig, SamplingConfig, TrainConfig
from rla_core.envs.demos import DEMO_COLUMNS
from rla_core.envs.judge import judge_steps
from rla_core.errors import ArtifactError, ModelError
from rla_core.models.bootstrap import ensure_tiny_vl_model, resolve_model
from rla_core.models.generator import TransformersGenerator
from rla_core.models.logprobs import token_logprobs
from rla_core.models.multimodal import ImagePrompt, VisionProcessor, is_vision_language, load_vl_model
from rla_core.models.sft import sft
from rla_core.models.update import rl_update
from rla_core.schemas import empty_frame
from rla_core.settings.warm_start import _rows_digest, format_image_rows
from tests.models.conftest import CORPUS

SLOT = "<|vision_start|><|image_pad|><|vision_end|>"
# Forced at generation and scored by the trainer: text from the corpus, so it re-tokenises to the same ids.
CONTINUATION = " take the key"


def _screenshot(path: Path, *, dark: bool, size: tuple[int, int] = (224, 160)) -> str:
    """A synthetic 'form' PNG; the dark one differs in colours and layout."""
    img = Image.new("RGB", size, (30, 30, 30) if dark else (240, 240, 240))
    box = [120, 90, 200, 130] if dark else [20, 20, 100, 60]
    ImageDraw.Draw(img).rectangle(box, fill=(230, 180, 20) if dark else (20, 60, 200))
    img.save(path)
    return str(path)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    """Tiny models run fastest on one thread, most of all on shared cores (the conftest restores it)."""
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def vl_model(model_cache: Path) -> Path:
    return ensure_tiny_vl_model("policy", corpus=CORPUS, cache_dir=model_cache)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("shots")
    return {
        "light": _screenshot(d / "light.png", dark=False),
        # 300x200 -> resized to 308x196 -> 11x7 = 77 merged patches, capped to <= 64 by max_pixels.
        "dark": _screenshot(d / "dark.png", dark=True, size=(300, 200)),
    }


@pytest.fixture(scope="module")
def vl_gen(vl_model: Path) -> Iterator[TransformersGenerator]:
    g = TransformersGenerator(vl_model, device="cpu", batch_size=4, chat_template=True)
    yield g
    g.close()


def test_tiny_vl_checkpoint_is_local_cached_and_named_by_ref(vl_model: Path, model_cache: Path) -> None:
    assert resolve_model("tiny-vl:policy", corpus=CORPUS, cache_dir=model_cache) == vl_model  # cache hit
    assert is_vision_language(vl_model)
    files = {p.name for p in vl_model.iterdir()}
    assert {"preprocessor_config.json", "chat_template.jinja", "model.safetensors"} <= files
    config = json.loads((vl_model / "config.json").read_text())
    assert config["architectures"] == ["Qwen2VLForConditionalGeneration"]


def test_processor_renders_chat_and_expands_one_pad_per_patch_group(
    vl_model: Path, shots: dict[str, str]
) -> None:
    vp = VisionProcessor.from_pretrained(vl_model)
    prompt = vp.format(ImagePrompt("Which button?", (shots["light"], shots["dark"])), chat=True)
    assert prompt.text == f"<|im_start|>user\n{SLOT}{SLOT}Which button?<|im_end|>\n<|im_start|>assistant\n"
    # Without chat markup the slots go before the plain text.
    assert vp.format(ImagePrompt("go", (shots["light"],)), chat=False).text == SLOT + "go"
    batch = vp.encode([prompt, "plain text"])
    grid = batch["image_grid_thw"]
    # 224x160 -> 224x168 pixels = 16x12 patches of 14 -> 48 tokens after the 2x2 merge; 300x200 is
    # resized under max_pixels = 64*28*28 to 252x168 -> 18x12 patches -> 54 tokens.
    assert grid.tolist() == [[1, 12, 16], [1, 12, 18]]
    assert int((batch["input_ids"][0] == vp.image_token_id).sum()) == 48 + 54
    assert torch.equal(batch["mm_token_type_ids"][0], (batch["input_ids"][0] == vp.image_token_id).long())
    assert int(batch["mm_token_type_ids"][1].sum()) == 0  # the text prompt has no image token
    assert batch["pixel_values"].shape[0] == 4 * (48 + 54)  # one row per 14x14x2 patch before merging


def test_bad_image_input_raises_specific_errors(
    vl_model: Path, shots: dict[str, str], tmp_path: Path
) -> None:
    vp = VisionProcessor.from_pretrained(vl_model)
    missing = str(tmp_path / "gone.png")
    with pytest.raises(ModelError, match=r"gone\.png' of prompt '.*Which button\?' does not exist"):
        vp.encode([ImagePrompt(SLOT + "Which button?", (missing,))])
    with pytest.raises(ModelError, match="0 image slot"):
        vp.encode([ImagePrompt("never formatted", (shots["light"],))])
    formatted = vp.format(ImagePrompt("x", (shots["light"],)), chat=True)
    with pytest.raises(ModelError, match="format a prompt once"):
        vp.format(formatted, chat=True)
    with pytest.raises(ModelError, match="no images"):
        ImagePrompt("x", ())


def test_image_prompts_for_a_text_model_are_an_error(
    tiny_model: Path, shots: dict[str, str], tmp_path: Path
) -> None:
    gen = TransformersGenerator(tiny_model, device="cpu", batch_size=2)
    prompt = ImagePrompt(SLOT + "go", (shots["light"],))
    with pytest.raises(ModelError, match=r"text-only model \(Qwen2ForCausalLM\)"):
        gen.generate([prompt], n=1, sampling=SamplingConfig(max_new_tokens=2), seed=0)
    with pytest.raises(ModelError, match="text-only model"):
        gen.format_prompt(ImagePrompt("go", (shots["light"],)))
    rows = pl.DataFrame(
        {"prompt": [prompt.text], "response": [" north"], "advantage": [1.0], "images": [[shots["light"]]]}
    )
    with pytest.raises(ModelError, match=r"rl_update rows carry images, but .* is a text-only model"):
        rl_update(tiny_model, rows, cfg=TrainConfig(), out_dir=tmp_path / "out", seed=0, lora=LoraConfig())


def test_generate_from_image_prompts_is_seeded_and_batch_independent(
    vl_model: Path, vl_gen: TransformersGenerator, shots: dict[str, str]
) -> None:
    prompts = [
        vl_gen.format_prompt(ImagePrompt("Which button?", (shots["light"],))),
        vl_gen.format_prompt(ImagePrompt("Which two?", (shots["light"], shots["dark"]))),
        vl_gen.format_prompt("text only"),  # one list may mix image and text prompts
    ]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6)
    out = vl_gen.generate(prompts, n=2, sampling=sampling, seed=3)
    assert [len(s) for s in out] == [2, 2, 2]
    # prompt_tokens counts what the model saw: the image slots expanded (48 and 48 + 54 image tokens).
    vp = VisionProcessor.from_pretrained(vl_model)
    assert [s[0].prompt_tokens for s in out] == [len(vp.prompt_ids(p)) for p in prompts]
    assert out[0][0].prompt_tokens > 48 and out[1][0].prompt_tokens > 48 + 54
    # Sample j of prompt i depends only on (prompt i, its seed, j): one prompt per micro-batch agrees.
    single = TransformersGenerator(vl_model, device="cpu", batch_size=1, chat_template=True)
    assert single.generate(prompts, n=2, sampling=sampling, seed=3) == out


def test_update_logprobs_equal_generation_and_depend_on_the_image(
    vl_model: Path, vl_gen: TransformersGenerator, shots: dict[str, str], tmp_path: Path
) -> None:
    vp = VisionProcessor.from_pretrained(vl_model)
    prompts = [
        vp.format(ImagePrompt("Which button?", (shots["light"],)), chat=True),
        vp.format(ImagePrompt("Which two?", (shots["dark"], shots["light"])), chat=True),
    ]
    cont = vp.tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"]
    # Generation as the transformers backend runs it (left-padded batch, KV cache, images in), with the
    # continuation forced token by token; its raw logits give the log-probs the model had at generation.
    model = load_vl_model(vl_model, dtype=torch.float32).eval()
    enc = vp.encode(prompts, padding_side="left")
    width = enc["input_ids"].shape[1]
    with torch.no_grad():
        out = model.generate(
            **enc, max_new_tokens=len(cont), do_sample=False, output_logits=True, return_dict_in_generate=True,
            prefix_allowed_tokens_fn=lambda _row, ids: [cont[ids.shape[0] - width]],
        )  # fmt: skip
    assert out.sequences[:, width:].tolist() == [cont, cont]
    at_generation = torch.log_softmax(torch.stack(out.logits, 1).float(), -1)[..., cont].diagonal(
        dim1=1, dim2=2
    )
    # The recorded rows: formatted prompt text, response text, image references.
    rows = pl.DataFrame(
        {
            "prompt": [p.text for p in prompts],
            "response": [CONTINUATION] * 2,
            "images": [list(p.images) for p in prompts],
        }
    )
    in_update = torch.tensor(token_logprobs(vl_model, rows, micro_batch_size=2))
    # fp32 on CPU: the update's full forward (right-padded) and incremental decoding (left-padded, KV
    # cache) differ by float reduction order only: max |diff| measured 4.8e-7 on 2026-12-03 (1 and 2
    # threads); 1e-4 is far above that noise and far below what another image does (below).
    gap = float((in_update - at_generation).abs().max())
    assert gap < 1e-4, gap
    # Another image changes them (measured max |diff| 0.33): the pixels reach the update.
    swapped = rows.with_columns(pl.Series("images", [[shots["dark"]], [shots["light"], shots["dark"]]]))
    assert float((torch.tensor(token_logprobs(vl_model, swapped)) - in_update).abs().max()) > 0.05


def test_rl_update_with_image_rows_writes_a_loadable_vl_checkpoint(
    vl_model: Path, shots: dict[str, str], tmp_path: Path
) -> None:
    vp = VisionProcessor.from_pretrained(vl_model)
    prompt = vp.format(ImagePrompt("Which button?", (shots["light"],)), chat=True)
    rows = pl.DataFrame(
        {
            "prompt": [prompt.text, "text only row"],
            "response": [CONTINUATION, CONTINUATION],
            "advantage": [1.0, -1.0],
            "images": [[shots["light"]], None],  # image rows and text rows in one batch
        }
    )
    before = token_logprobs(vl_model, rows)
    metrics = rl_update(
        vl_model, rows, cfg=TrainConfig(lr=1e-3), out_dir=tmp_path / "out", seed=0, lora=LoraConfig()
    )
    assert metrics["rows_used"] == 2 and metrics["noop"] == 0.0
    assert (tmp_path / "out" / "preprocessor_config.json").is_file()
    after = token_logprobs(tmp_path / "out", rows)
    # A positive advantage raises its response's likelihood, a negative one lowers it.
    assert sum(after[0]) > sum(before[0]) and sum(after[1]) < sum(before[1])


def test_sft_on_image_demonstrations(vl_model: Path, shots: dict[str, str], tmp_path: Path) -> None:
    vp = VisionProcessor.from_pretrained(vl_model)
    prompts = [vp.format(ImagePrompt("Which button?", (shots[k],)), chat=True) for k in ("light", "dark")]
    rows = pl.DataFrame(
        {
            "prompt": [p.text for p in prompts],
            "response": [CONTINUATION, " open the chest"],
            "images": [list(p.images) for p in prompts],
        }
    )
    metrics = sft(vl_model, rows, out_dir=tmp_path / "warm", epochs=2, lr=1e-2, seed=0)
    assert metrics["rows_used"] == 2 and metrics["loss"] < metrics["first_loss"]
    assert (tmp_path / "warm" / "preprocessor_config.json").is_file()


def test_sharded_generator_formats_image_prompts_as_the_in_process_one(
    vl_model: Path, vl_gen: TransformersGenerator, shots: dict[str, str]
) -> None:
    from rla_core.config import ClusterBackend, ClusterConfig, ServingConfig
    from rla_core.dispatch import ShardedGenerator
    from rla_core.models.generator import GeneratorSpec
    from rla_core.stage_inputs import GenerationModels

    models = GenerationModels(
        serving=ServingConfig(chat_template=True), device="cpu", generation_batch_size=4
    )
    spec = GeneratorSpec(checkpoint=vl_model, models=models, role="policy", name=None, threads=1)
    sharded = ShardedGenerator(spec, ClusterConfig(backend=ClusterBackend.RAY, workers=2))  # starts no Ray
    prompt = ImagePrompt("Which button?", (shots["light"], shots["dark"]))
    assert sharded.format_prompt(prompt) == vl_gen.format_prompt(prompt)


def test_vllm_chat_parts_render_to_exactly_the_recorded_prompt(vl_model: Path, shots: dict[str, str]) -> None:
    from rla_core.models.multimodal import chat_content, verbatim_chat_template

    vp = VisionProcessor.from_pretrained(vl_model)
    prompt = vp.format(
        ImagePrompt("Before and after: did it work?", (shots["light"], shots["dark"])), chat=True
    )
    parts = chat_content(prompt, vp.slot)
    # text, image, image, text: the chat markup before the slots, the question and the assistant header after.
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url", "text"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    # What the vLLM server renders with the template it is started with (VllmServer.start).
    rendered = vp.tokenizer.apply_chat_template(
        [{"role": "user", "content": parts}], chat_template=verbatim_chat_template(vp.slot), tokenize=False
    )
    assert rendered == prompt.text


def test_vl_judge_sees_the_screens_before_and_after_each_step(
    vl_gen: TransformersGenerator, shots: dict[str, str], tmp_path: Path
) -> None:
    """models.images.reward: each judge prompt shows the step's two screens (recorded as the rollouts'
    references) and the agent's prompt as text, without the agent's own image slot."""
    (tmp_path / "files").mkdir()
    for name, src in shots.items():
        (tmp_path / "files" / f"{name}.png").write_bytes(Path(src).read_bytes())
    agent = vl_gen.format_prompt(ImagePrompt("Task: click ONE.", (shots["light"],))).text
    steps = [
        {"task_id": "t", "rollout_id": 0, "step": s, "prompt": agent, "response": "\\boxed{0}",
         "next_observation": "clicked", "observation_ref": f"files/{a}.png", "next_observation_ref": f"files/{b}.png"}
        for s, (a, b) in enumerate([("light", "dark"), ("dark", "dark")])
    ]  # fmt: skip
    rollouts = pl.concat([empty_frame("rollouts"), pl.DataFrame(steps)], how="diagonal_relaxed")
    args = {
        "m": 2,
        "sampling": SamplingConfig(max_new_tokens=4),
        "seed": 3,
        "iteration": 1,
        "template": "gui_judge",
    }
    judged = judge_steps(rollouts, generator=vl_gen, screens=tmp_path, **args)
    assert (
        judged["images"].to_list()
        == [["files/light.png", "files/dark.png"]] * 2 + [["files/dark.png"] * 2] * 2
    )
    for prompt in judged["prompt"]:
        assert prompt.count(SLOT) == 2 and "Task: click ONE." in prompt
    # The same steps judged as text (images off): no slot at all, no images recorded.
    text = judge_steps(rollouts, generator=vl_gen, **args)
    assert text["images"].null_count() == 4 and not any(SLOT in p for p in text["prompt"])
    # A step without the screen after it (recorded before next_observation_ref existed) is named.
    old = rollouts.with_columns(next_observation_ref=pl.lit(None, pl.String))
    with pytest.raises(
        ArtifactError, match=r"step 0 of task t \(rollout 0\) has .*next_observation_ref=None"
    ):
        judge_steps(old, generator=vl_gen, screens=tmp_path, **args)


def test_warm_start_rows_get_the_generators_image_slots_and_a_content_key(
    vl_model: Path, tiny_model: Path, vl_gen: TransformersGenerator, shots: dict[str, str], tmp_path: Path
) -> None:
    rows = pl.DataFrame(
        {
            "prompt": ["Which button?", "Plain text"],
            "images": [[shots["light"]], None],
            "response": ["a", "b"],
        },
        schema=DEMO_COLUMNS,
    )
    formatted = format_image_rows(vl_model, rows, chat=True)
    # Exactly what the generator formats at rollout time; a text row is left as it is.
    assert formatted["prompt"].to_list() == [
        vl_gen.format_prompt(ImagePrompt("Which button?", (shots["light"],))).text,
        "Plain text",
    ]
    # The warm-start cache key reads the images by content: the same screen elsewhere is the same key.
    moved = tmp_path / "elsewhere.png"
    moved.write_bytes(Path(shots["light"]).read_bytes())
    again = formatted.with_columns(images=pl.Series([[str(moved)], None], dtype=pl.List(pl.String)))
    assert _rows_digest(again) == _rows_digest(formatted)
    other = formatted.with_columns(images=pl.Series([[shots["dark"]], None], dtype=pl.List(pl.String)))
    assert _rows_digest(other) != _rows_digest(formatted)
    with pytest.raises(ModelError, match="warm-start rows with screenshots"):
        format_image_rows(tiny_model, rows, chat=True)
