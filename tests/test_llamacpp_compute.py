"""llama.cpp's compute buffers (core/memory/llamacpp_compute.py), by hand from the graph's tensor shapes.

Every expected number below is written out from the tensors llama.cpp 0c1e57098 builds (see the module's docstring);
where libllama was run on a model of the same shapes (tests/engines/test_llamacpp_compute.py: one or two layers of
Llama-3.1-8B with its 128K vocabulary), its own byte count is quoted beside the arithmetic: they agree.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.engines import configured
from core.engines.llamacpp import LlamaCppBuild, LlamaCppEngine, Offload
from core.errors import InputError
from core.fit import Setup, Solver
from core.memory.gpus import card_named
from core.memory.llamacpp_compute import compute_buffers, cpu_only, llamacpp_overhead, ubatch, widths
from core.model.loading import load_model, model_from_config
from core.units import MIB
from tests.test_gpu_logs import ROWS, setup_of
from tests.tiny_configs import tiny_raw

LLAMA = load_model("meta-llama/Llama-3.1-8B-Instruct")  # 32 layers, hidden 4096, 32 heads, 8 KV heads, vocab 128256
MOE = load_model("Qwen/Qwen3-30B-A3B")  # hidden 2048, 128 experts of 768, top 8, 32 heads × 128, vocab 151936
CLI = LlamaCppEngine()  # llama-cli: n_ubatch 512, n_batch 2048, flash attention on
NO_FA = CLI.with_options(flash_attn=False)
T = 512

# the output: [128256, 512] f32 logits, two [4096, 512] f32 rows, 512 i32 output ids (libllama: 279,447,552)
LLAMA_LOGITS = 4 * T * 128256 + 2 * 4 * T * 4096 + 4 * T
# a GPU holds one [4096, 512] row fewer beside them: llama.cpp's RPC device (measurements/gpu_logs/
# llamacpp_rpc_split.json: 258.50 MiB for Llama-8B shapes) and published CUDA logits peaks (tests/test_gpu_logs.py)
LLAMA_LOGITS_GPU = LLAMA_LOGITS - 4 * T * 4096
# inputs with flash attention at 4096 cells: three i32 id rows, the f16 mask, the K and V set_rows indices (i64)
LLAMA_INPUTS_FA_4K = 3 * 4 * T + 2 * T * 4096 + 8 * T + 8 * T


def test_llama_8b_output_peak_by_hand():
    assert LLAMA_LOGITS == 279_447_552  # libllama's CPU compute buffer for llama8b_2l at ub 512, flash on
    assert round(LLAMA_LOGITS_GPU / MIB, 2) == 258.50
    for context in (512, 4096, 32768, 131072):  # with flash attention nothing n_kv-sized beats the logits
        assert compute_buffers(CLI, LLAMA, context).gpu.bytes == LLAMA_LOGITS_GPU
        assert cpu_only(CLI, LLAMA, context).bytes == LLAMA_LOGITS


def test_llama_8b_no_flash_attention_grows_with_the_context():
    """kq = n_kv × T × n_head f32, beside q/residual rows, the f32 mask and the per-element V index."""
    kq = 32 * 32768 * T * 4
    rows = 4 * T * (3 * 4096 + 2 * 4096)
    inputs = 3 * 4 * T + 4 * T * 32768 + 8 * T + 8 * T * 1024
    assert kq + rows + inputs == 2_260_740_096  # libllama, llama8b_1l at n_ctx 32768, ub 512, flash off
    assert compute_buffers(NO_FA, LLAMA, 32768).gpu.bytes == kq + rows + inputs
    short = compute_buffers(NO_FA, LLAMA, 2048).gpu.bytes
    assert short == LLAMA_LOGITS_GPU  # 2,048 cells: 128 MiB of kq, under the logits


def test_sequences_split_the_cells_unless_unified():
    """4 sequences of 8,192: 8,192 cells per stream, so kq is a quarter of one 32K stream; unified, it is the same
    as one 32K sequence (one stream of 32,768 cells)."""
    per_stream = compute_buffers(NO_FA, LLAMA, 8192, n_seq=4).gpu.bytes
    assert per_stream == 32 * 8192 * T * 4 + 4 * T * 5 * 4096 + 3 * 4 * T + 4 * T * 8192 + 8 * T + 8 * T * 1024
    unified = compute_buffers(NO_FA.with_options(kv_unified=True), LLAMA, 8192, n_seq=4).gpu.bytes
    assert unified == compute_buffers(NO_FA, LLAMA, 32768).gpu.bytes


def test_host_buffer_holds_the_inputs_and_the_embeddings():
    host = compute_buffers(CLI, LLAMA, 4096).host
    assert host.bytes == LLAMA_INPUTS_FA_4K + 4 * T * 4096
    assert "embeddings" in host.label


def test_ubatch_is_capped_by_batch_context_and_rounded_to_sequences():
    assert ubatch(CLI.with_options(n_batch=100), LLAMA, 4096, 1).tokens == 100
    assert ubatch(CLI, LLAMA, 200, 1).tokens == 256  # n_ctx is padded to 256 first
    three = ubatch(CLI.with_options(n_ubatch=2048), LLAMA, 1000, 3)  # n_ctx 3,072: 2,048, rounded up to 2,049
    assert (three.tokens, three.outputs) == (2049, 2048)
    server = ubatch(CLI, LLAMA, 4096, 4, n_outputs_max=4)  # llama-server: one output per slot
    assert (server.tokens, server.outputs) == (T, 4)


def test_llama_server_outputs_leave_the_ffn_as_the_peak():
    """With 4 outputs the logits are 2 MiB; the peak is the FFN (gate, up, product and four rows) beside the inputs:
    the same arithmetic libllama's 130,035,744 B confirms for the 8B shapes at 8,192 unified cells."""
    item = compute_buffers(CLI.with_options(kv_unified=True), LLAMA, 2048, n_seq=4, n_outputs_max=4).gpu
    ffn = 4 * T * (3 * 14336 + 4 * 4096)
    inputs = 3 * 4 * T + 2 * T * 8192 + 8 * T + 8 * T
    assert item.bytes == ffn + inputs
    assert abs(item.bytes - 130_035_744) <= 2048  # libllama; the 2 KiB: the 4 output ids kvscope pads to 128 B


def test_moe_experts_in_ram_are_copied_to_the_gpu_for_big_batches():
    """op_offload: a matmul whose weight is in system RAM runs on the GPU for ≥ 32 rows, its weight copied into the
    GPU's compute buffer first. F16 experts of Qwen3-30B-A3B: 128 × 768 × 2048 × 2 B per tensor."""
    copy = 128 * 768 * 2048 * 2
    where = Offload.of(None, len(MOE.layers), range(48))
    experts = 4 * T * max(3 * 8 * 768 + 4 * 2048, 8 * 768 + 2 * 8 * 2048 + 3 * 2048)
    inputs = 3 * 4 * T + 2 * T * 4096 + 8 * T + 8 * T
    assert compute_buffers(CLI, MOE, 4096, 1, where, copy).gpu.bytes == experts + inputs + copy
    small = CLI.with_options(n_ubatch=16)  # under 32 rows the CPU runs them: no copy, the logits are the peak
    # the logits, one [2048, 16] row beside them on a GPU (LLAMA_LOGITS_GPU), the output ids padded to 128 B
    assert compute_buffers(small, MOE, 4096, 1, where, copy).gpu.bytes == 4 * 16 * (151936 + 2048) + 128


def test_nothing_offloaded_leaves_the_gpu_buffer_empty_and_the_cpu_holds_the_graph():
    nowhere = Offload.of(0, len(LLAMA.layers))
    buffers = compute_buffers(CLI, LLAMA, 4096, 1, nowhere)
    assert buffers.gpu.bytes == 0
    assert buffers.host == cpu_only(CLI, LLAMA, 4096)
    assert buffers.host.bytes == LLAMA_LOGITS


def test_widths_read_the_graph_shapes():
    w = widths(LLAMA)
    assert (w.n_embd, w.n_vocab, w.n_head, w.n_q, w.n_k, w.n_v, w.n_ff) == (4096, 128256, 32, 4096, 1024, 1024, 14336)
    m = widths(MOE)
    assert (m.n_ff, m.n_expert_ff, m.n_expert_out, m.n_q) == (0, 8 * 768, 8 * 2048, 32 * 128)
    ds = widths(load_model("deepseek-ai/DeepSeek-V3"))
    assert (ds.n_q, ds.n_latent, ds.n_ff, ds.n_shared_ff) == (128 * (512 + 64), 512, 18432, 2048)


def test_bad_input_is_an_input_error():
    with pytest.raises(InputError, match="positive"):
        compute_buffers(CLI, LLAMA, 0)
    with pytest.raises(InputError, match="n_ubatch"):
        compute_buffers(CLI.with_options(n_ubatch=0), LLAMA, 4096)
    with pytest.raises(InputError, match="n_outputs_max"):
        compute_buffers(CLI, LLAMA, 4096, n_outputs_max=-1)


def test_overhead_items_show_their_arithmetic():
    items = llamacpp_overhead(NO_FA, LLAMA, 32768)
    assert [i.label for i in items] == ["CUDA context", "compute buffer"]
    assert items[1].bytes == compute_buffers(NO_FA, LLAMA, 32768).gpu.bytes
    assert "32 heads × 32,768 cells" in items[1].formula


def test_fit_uses_the_graph_model():
    """core.fit's llama.cpp overhead is this compute buffer: fixed with flash attention, growing without it."""
    card = card_named("RTX 4090")
    base = Setup(LLAMA, configured("llama.cpp"), card, weights="q4_k_m")
    solver = Solver(base)
    assert {i.bytes for c in (4096, 65536) for i in solver.overhead(c) if i.label == "compute buffer"} == {
        LLAMA_LOGITS_GPU
    }
    no_fa = Solver(replace(base, engine=configured("llama.cpp").with_options(flash_attn=False)))
    short, long = (next(i.bytes for i in no_fa.overhead(c) if i.label == "compute buffer") for c in (4096, 65536))
    assert long - short >= 32 * (65536 - 4096) * T * 4  # the kq grows by n_head × T × 4 B per cell
    assert long > 32 * 65536 * T * 4 == 4 * 1024 * MIB  # 4 GiB of kq alone


def test_fit_copies_the_largest_expert_tensor_kept_in_ram():
    card = card_named("RTX 4090")
    setup = Setup(MOE, configured("llama.cpp"), card, weights="f16", cpu_experts=range(48))
    solver = Solver(setup)
    compute = next(i.bytes for i in solver.overhead(4096) if i.label == "compute buffer")
    # F16 experts: each of gate/up/down is 128 × 768 × 2048 × 2 B; a third of a layer's routed bytes
    assert solver.cpu_weight == 128 * 768 * 2048 * 2
    assert compute == compute_buffers(CLI, MOE, 4096, 1, solver.offload, solver.cpu_weight).gpu.bytes
    assert compute > 128 * 768 * 2048 * 2


QWEN35 = load_model("Qwen/Qwen3.5-9B")  # 8 of 32 layers full attention: 16 heads × 256 (+ gate), 4 KV heads; 248K vocab


def _log(row_id: str) -> tuple[dict, Solver]:
    """A published log's row (tests/test_gpu_logs.py) and kvscope's solver for it under the row's own build."""
    row = next(r for r in ROWS if r["id"] == row_id)
    setup = setup_of(row)
    build = LlamaCppBuild.parse(row["engine_version"].split()[1])
    return row, Solver(replace(setup, engine=setup.engine.with_options(build=build)))


def test_builds_before_the_f16_mask_cast_an_f32_mask_copy_on_the_gpu():
    """llama-server b8571, Qwen3.5-9B at 262,144 unified cells × 2 slots, q8_0, flash attention (808.02 MiB logged,
    −38 % for a graph with only f16 masks). The first attention layer holds the f32 mask copy and its f16 cast
    beside its q, k, v, gate and the residual: by hand from the shapes, and the log's own MiB."""
    row, solver = _log("llamaserver-qwen35-9b-q4km-262k-q8kv-rtx4070")
    cells = 262_144
    ids = 3 * 4 * T + 8 * T + 8 * T  # token ids, positions, output ids; K and V set_rows indices
    masks = 4 * T * cells + 2 * T * cells  # the f32 copy and its cast
    layer = 4 * T * (2 * 16 * 256 + 2 * 1024 + 2 * 1024 + 16 * 256) + 4 * T * 4096  # q, k, v twice; gate; residual
    engine, outputs = solver.engine, solver.engine.options.n_outputs_max
    got = compute_buffers(engine, QWEN35, cells // 2, 2, solver.offload, solver.cpu_weight, outputs)
    assert got.gpu.bytes == ids + masks + layer
    assert got.gpu.label.startswith("f32 masks cast to f16")
    assert got.gpu.bytes / MIB == pytest.approx(row["buffers_mib"]["compute"]["CUDA0"], abs=0.02)
    # the bundled build (PR #23764 in) makes the mask f16 up front: the logits are the peak again
    bundled = compute_buffers(engine.with_options(build=LlamaCppBuild()), QWEN35, cells // 2, 2, solver.offload)
    assert bundled.gpu.label == "logits" and bundled.gpu.bytes < got.gpu.bytes


def test_builds_before_the_f16_mask_hold_f32_masks_in_the_host_buffer():
    """gpt-oss-20b b6699 at 131,072 cells (+ 768 SWA cells): the CUDA_Host compute buffer is the f32 masks, the ids
    and the input embeddings, to the printed 0.01 MiB."""
    row, solver = _log("llamaserver-b6699-gpt-oss-20b-mxfp4-cpumoe-128k-rtx3070")
    engine = solver.engine
    host = compute_buffers(engine, solver.model, 131_072, 1, solver.offload, solver.cpu_weight).host
    assert host.bytes == 3 * 4 * T + 4 * T * (131_072 + 768) + 2 * (8 * T + 8 * T) + 4 * T * 2880
    assert host.bytes / MIB == pytest.approx(row["buffers_mib"]["compute"]["CUDA_Host"], abs=0.01)


@pytest.mark.parametrize(
    ("spec", "carries"),
    [("b9293", False), ("b9592", True), ("2026-05-26", False), ("2026-05-27", True), ("b6699", False)],
)
def test_the_f16_mask_change_is_placed_by_build(spec, carries):
    assert LlamaCppBuild.parse(spec).f16_mask is carries
    assert LlamaCppBuild().f16_mask  # the bundled build carries it


def test_a_build_number_between_the_known_ones_asks_for_a_date():
    with pytest.raises(InputError, match="23764"):
        LlamaCppBuild.parse("b9400")


def test_nextn_graphs_keep_one_more_row_beside_the_logits():
    """Qwen3.5 keeps its final norm over all T rows (t_h_nextn, a graph output) and picks the output rows after it:
    three [4096, T] rows beside the [248320, T] logits; libllama's own count for the same shapes is 533,727,232 B
    (tests/engines/test_llamacpp_compute.py, qwen35_9b_8l at 262,144 cells × 2 unified, q8_0). A GPU holds one row
    fewer: 501.00 MiB, what the published RTX 4070 log of Qwen3.5-9B at 32K prints (tests/test_gpu_logs.py)."""
    engine = CLI.with_options(kv_unified=True)
    assert cpu_only(engine, QWEN35, 131_072, 2).bytes == 4 * T * 248_320 + 3 * 4 * T * 4096 + 4 * T == 533_727_232
    item = compute_buffers(engine, QWEN35, 131_072, 2).gpu
    assert item.label == "logits"
    assert item.bytes == 533_727_232 - 4 * T * 4096 and round(item.bytes / MIB, 2) == 501.00


PHI4 = load_model("microsoft/phi-4")  # model_type phi3: one q|k|v projection; hidden 5120, 40 heads × 128, 10 KV heads


def test_a_fused_qkv_holds_no_query_rows_beside_kq():
    """Phi-3's q, k and v are views of one [n_q + n_k + n_v, T] matmul (llama-graph.cpp build_qkv): beside kq stand
    three [5120, T] rows and no query rows, where a model with separate projections holds 3·n_embd + 2·n_q (20 MiB
    more here). libllama's own count for Phi-4's config cut to two layers and a 4K vocabulary (converted and run once
    as tests/engines/test_llamacpp_compute.py does its tiny models) at 32,768 cells, ub 512, flash off is
    2,788,173,824 B, and 380,643,328 B at 4,096 cells."""
    assert widths(PHI4).fused_qkv and not widths(LLAMA).fused_qkv
    kq = 40 * 32768 * T * 4
    rows = 4 * T * 3 * 5120
    inputs = 3 * 4 * T + 4 * T * 32768 + 8 * T + 8 * T * 1280  # f32 mask, V's index per element of 10 × 128
    item = cpu_only(NO_FA, PHI4, 32768)
    assert item.label == "attention KQ (no flash) + graph inputs"
    assert item.bytes == kq + rows + inputs == 2_788_173_824
    assert "+ 3·5120)" in item.formula  # the formula shows the rows it counts, and no 2·n_q
    assert cpu_only(NO_FA, PHI4, 4096).bytes == 380_643_328


def test_a_fused_qkv_with_flash_attention_holds_the_qkv_row():
    """With flash attention a fused layer holds the q|k|v row, q and k after rope, the output and the residual:
    on a tiny MHA Phi-3 (hidden 128, 4 heads × 32, 4 KV heads, FFN 96, so the attention is the peak) libllama counts
    593,408 B at 512 cells, ub 128 (tests/engines/test_llamacpp_compute.py, phi3_mha)."""
    phi3 = model_from_config(tiny_raw("phi3", hidden_size=128, num_key_value_heads=4), "phi3_mha")
    t = 128
    body = 4 * t * (128 + 3 * 128 + 2 * 128 + 128)
    inputs = 3 * 4 * t + 2 * t * 512 + 8 * t + 8 * t  # ids, f16 mask, K and V indices
    item = cpu_only(CLI.with_options(n_ubatch=t), phi3, 512)
    assert item.label == "attention (flash) + graph inputs"
    assert item.bytes == body + inputs == 593_408
