"""Parameter counting by formula, term by term, as the lecture does it."""
from __future__ import annotations

from core.serve.fmt import latex_int
from core.nn.meta import meta_transformer
from core.nn.config import ModelConfig, head_counts
from core.nn.model import Transformer
from core.nn.config import ACTIVATION_LATEX


def count_parameters(config: ModelConfig) -> dict[str, int]:
    """Analytic count of every parameter group of ``Transformer(config)``.

    Per block: attention 4d^2 (W_Q, W_K, W_V, W_O; independent of h), MLP 2*d*d_ff (8d^2 when d_ff=4d),
    two LayerNorms with scale and shift 4d. Outside the blocks: token embedding m*d, position table
    n_ctx*d, final LayerNorm 2d, output map d*m (not tied to the embedding).
    GPT-2's terms where the config has them: biases (4d on attention's maps, d_ff + d on the MLP's), and a
    tied output map, which reuses the embedding and so adds nothing.
    """
    d, m, L = config.d_model, config.vocab_size, config.n_layers  # width, vocabulary size, blocks
    # The lecture's block (d=64, h=4, d_ff=256, no biases): 4·64² + 2·64·256 + 4·64 = 16,384 + 32,768 + 256
    # = 49,408, and the same for any h, since the heads only split the width.
    # the switches of core.nn.model that take a piece away (issue 29): each removes exactly its own tensors
    w_o, mlp, norms = config.w_o, config.mlp, config.norm != "none"
    counts = {
        "W_Q": d * d,  # h heads of d x d/h each: h·d·(d/h) = d², so h drops out
        "W_K": d * d,  # the same shape: a head's keys must be as wide as its queries (d/h) for q·k
        "W_V": d * d,
        "W_O": d * d if w_o else 0,  # the h outputs of d/h, concatenated back to d, mixed into the stream
        "attention_biases": (3 * d + (d if w_o else 0)) if config.bias else 0,  # b_Q, b_K, b_V (d each) and b_O (d)
        "W1": d * config.d_ff if mlp else 0,  # up from the stream into the hidden layer
        "W2": config.d_ff * d if mlp else 0,  # and back down
        "mlp_biases": config.d_ff + d if config.bias and mlp else 0,  # b1 (d_ff) and b2 (d)
        # ln1 before attention and ln2 before the MLP, each a scale and a shift of d (no MLP: no ln2 either)
        "norms": (2 * d + (2 * d if mlp else 0)) if norms else 0,
    }
    # the biases in one figure: the Parameters page draws them as one bar (pages.parameters.figures.parameter_bar)
    counts["biases"] = counts["attention_biases"] + counts["mlp_biases"]
    counts["attention"] = counts["W_Q"] + counts["W_K"] + counts["W_V"] + counts["W_O"] + counts["attention_biases"]
    counts["mlp"] = counts["W1"] + counts["W2"] + counts["mlp_biases"]
    # 4d² + 2·d·d_ff + 4d; 12d² + 4d when d_ff = 4d; with biases 4d² + 2·d·d_ff + 9d + d_ff
    counts["per_block"] = counts["attention"] + counts["mlp"] + counts["norms"]
    counts["blocks"] = L * counts["per_block"]  # the blocks share no weights: L copies of the same shape
    counts["token_embedding"] = m * d  # one d-vector per vocabulary entry: an (m, d) table
    # learned absolute positions, one d-vector per position
    counts["position_embedding"] = config.n_ctx * d if config.positions else 0
    counts["final_norm"] = 2 * d if config.norm == "pre" else 0  # ln_f before the output map: one more scale and shift
    # d·m with no bias (GPT-2's output map has none either); tied: the embedding matrix again, nothing new
    counts["output"] = 0 if config.tie_weights else d * m
    # the lecture's 12d²L is the blocks alone (without their 4d): the embeddings and the output map come on top
    counts["total"] = (
        counts["blocks"] + counts["token_embedding"] + counts["position_embedding"]
        + counts["final_norm"] + counts["output"]
    )
    return counts


# Rows for a breakdown table: (key, what it is, formula in LaTeX-free text), for the lecture's model
# (no biases, output map of its own); breakdown_rows rewrites the rows a GPT-2 config changes
BREAKDOWN_ROWS = [
    ("attention", "attention W_Q, W_K, W_V, W_O (per block)", "4·d²"),
    ("mlp", "MLP W1, W2 (per block)", "2·d·d_ff"),
    ("norms", "two LayerNorms, scale and shift (per block)", "4·d"),
    ("per_block", "one block", "4d² + 2·d·d_ff + 4d"),
    ("blocks", "all blocks", "L · per block"),
    ("token_embedding", "token embedding", "m·d"),
    ("position_embedding", "position table", "n_ctx·d"),
    ("final_norm", "final LayerNorm", "2·d"),
    ("output", "output map to the vocabulary", "d·m"),
    ("total", "whole model", "sum of the above"),
]

# Every matrix on its own, then the groups: the order of a detailed table. W_Q..W_O come before their sum
# "attention" (BREAKDOWN_ROWS[:1]), W1 and W2 before "mlp", where BREAKDOWN_ROWS[1:] goes on.
_MATRIX_ROWS = {
    "W_Q": ("W_Q, the h query maps of d × d/h side by side (per block)", "d·d"),
    "W_K": ("W_K, the h key maps (per block)", "d·d"),
    "W_V": ("W_V, the h value maps (per block)", "d·d"),
    "W_O": ("W_O, mixes the concatenated heads (per block)", "d·d"),
    "attention_biases": ("attention biases b_Q, b_K, b_V, b_O (per block)", "4·d"),
    "W1": ("MLP W1, d into d_ff (per block)", "d·d_ff"),
    "W2": ("MLP W2, d_ff back to d (per block)", "d_ff·d"),
    "mlp_biases": ("MLP biases b1, b2 (per block)", "d_ff + d"),
}
DETAILED_ROWS = [(key, *_MATRIX_ROWS[key]) for key in ("W_Q", "W_K", "W_V", "W_O")] + BREAKDOWN_ROWS[:1] + [
    (key, *_MATRIX_ROWS[key]) for key in ("W1", "W2")] + BREAKDOWN_ROWS[1:]


def breakdown_rows(config: ModelConfig, detailed: bool = False) -> list[tuple[str, str, str]]:
    """The breakdown rows (``DETAILED_ROWS`` when ``detailed``) with the terms that apply to ``config``: the
    lecture's rows unchanged; with biases, their own rows and the formulas that include them; with a tied
    output map, that row says it adds nothing."""
    rows = list(DETAILED_ROWS if detailed else BREAKDOWN_ROWS)
    if config.bias:
        # 9d + d_ff per block: the norms' 4d, attention's four biases of d, and the MLP's b1 (d_ff) and b2 (d)
        changed = {"attention": ("attention W_Q, W_K, W_V, W_O and their biases (per block)", "4·d² + 4·d"),
                   "mlp": ("MLP W1, W2 and their biases (per block)", "2·d·d_ff + d_ff + d"),
                   "per_block": ("one block", "4d² + 2·d·d_ff + 9d + d_ff")}
        rows = [(key, *changed[key]) if key in changed else (key, label, formula) for key, label, formula in rows]
        if detailed:
            # each bias row goes after its matrices, just before the group total that includes it
            at = [key for key, *_ in rows].index("attention")
            rows.insert(at, ("attention_biases", *_MATRIX_ROWS["attention_biases"]))
            at = [key for key, *_ in rows].index("mlp")
            rows.insert(at, ("mlp_biases", *_MATRIX_ROWS["mlp_biases"]))
    if not config.lecture_block:
        rows = _variant_rows(config, rows)
    if config.tie_weights:
        rows = [(key, "output map, tied to the token embedding (the same matrix)", "0 new") if key == "output"
                else (key, label, formula) for key, label, formula in rows]
    return rows


def build_on_meta(config: ModelConfig) -> Transformer:
    """A real ``Transformer(config)`` whose tensors live on PyTorch's meta device: shapes without storage,
    so even GPT-3's 175 billion parameters cost no memory and can be counted tensor by tensor."""
    return meta_transformer(config)  # every tensor the constructor makes is a meta tensor, and none is initialised


def count_module_parameters(module) -> int:
    # .parameters() yields a shared tensor once, so a tied output map is not counted a second time; a piece a
    # variant took away (None) counts 0
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def measured_counts(model) -> dict[str, int]:
    """The same groups as ``count_parameters``, counted from the tensors of a real model."""
    block = model.blocks[0]  # every block has the same shapes: the first stands for one block
    attn = block.attn
    d = model.config.d_model
    qkv = attn.qkv.weight  # (3d, d): rows 0:d are W_Q, d:2d W_K, 2d:3d W_V
    mlp = block.mlp  # None in an attention-only variant, as are attn.out without W_O and pos_emb without positions

    def numel(bias):
        return 0 if bias is None else bias.numel()  # nn.Linear(bias=False) leaves .bias None

    counts = {
        # (3d, d) -> three (d, d) slices: the fused map counted as the lecture's three matrices
        "W_Q": qkv[:d].numel(), "W_K": qkv[d:2 * d].numel(), "W_V": qkv[2 * d:].numel(),
        "W_O": numel(attn.out and attn.out.weight),
        "attention_biases": numel(attn.qkv.bias) + numel(attn.out and attn.out.bias),
        "W1": numel(mlp and mlp.w1.weight), "W2": numel(mlp and mlp.w2.weight),
        "mlp_biases": numel(mlp and mlp.w1.bias) + numel(mlp and mlp.w2.bias),
        "norms": count_module_parameters(block.ln1) + count_module_parameters(block.ln2),
        # the groups counted from whole modules, not summed from the parts above: a tensor the formula forgot
        # shows as a disagreement in parameter_table
        "attention": count_module_parameters(attn),
        "mlp": count_module_parameters(mlp),
        "per_block": count_module_parameters(block),
        "blocks": sum(count_module_parameters(b) for b in model.blocks),
        "token_embedding": model.tok_emb.weight.numel(),
        "position_embedding": numel(model.pos_emb and model.pos_emb.weight),
        "final_norm": count_module_parameters(model.ln_f),
        # a tied output map is the embedding's own tensor: PyTorch counts it once, and so do we
        "output": 0 if model.head.weight is model.tok_emb.weight else model.head.weight.numel(),
        "total": count_module_parameters(model),
    }
    counts["biases"] = counts["attention_biases"] + counts["mlp_biases"]
    return counts


def parameter_table(model, rows=None) -> list[dict]:
    """Rows of (part, formula, value by formula, value counted from the model, agree?); ``rows`` default to
    ``breakdown_rows`` of the model's config."""
    by_formula = count_parameters(model.config)
    counted = measured_counts(model)
    rows = breakdown_rows(model.config) if rows is None else rows
    return [
        {"part": label, "formula": formula, "by formula": by_formula[key], "counted in the model": counted[key],
         "agree": by_formula[key] == counted[key]}
        for key, label, formula in rows
    ]


def heads_sweep(config: ModelConfig, max_rows: int = 6) -> list[dict]:
    """One block's attention count for several head counts h dividing d, by formula and counted in a
    one-block model on the meta device: the numbers never change, because heads split the width."""
    d = config.d_model
    divisors = head_counts(d, limit=None)
    step = max(1, len(divisors) // max_rows)
    # about max_rows head counts spread over the divisors, and always the model's own h
    chosen = sorted(set(divisors[::step][:max_rows - 1] + [config.n_heads]))
    rows = []
    for h in chosen:
        # one block and the smallest vocabulary and window: only the block is counted
        cfg = ModelConfig(vocab_size=1, n_ctx=1, d_model=d, n_heads=h, n_layers=1, d_ff=config.d_ff, bias=config.bias)
        block = build_on_meta(cfg).blocks[0]
        rows.append({"heads h": h, "width per head d/h": d // h, "attention by formula": count_parameters(cfg)["attention"],
                     "attention counted": count_module_parameters(block.attn),
                     "block counted": count_module_parameters(block)})
    return rows


def mlp_latex(config, hidden: bool = False) -> str:
    """The MLP's formula for ``config``: its own nonlinearity (ReLU or GELU), with b_1 and b_2 only when the model
    has biases. ``hidden``: written in two steps, the hidden vector h first (the Inside page's MLP view)."""
    f = ACTIVATION_LATEX[config.activation]
    b1, b2 = (" + b_1", " + b_2") if config.bias else ("", "")
    if hidden:
        return (rf"h = {f}(W_1^\top u{b1}) \in \mathbb{{R}}^{{d_{{ff}}}}, \qquad "
                rf"\operatorname{{MLP}}(u) = W_2^\top h{b2}")
    return rf"\operatorname{{MLP}}(u) = W_2^\top \,{f}(W_1^\top u{b1}){b2}"


def share_latex(config) -> tuple[str, str]:
    """Attention's and the MLP's shares of one block as fractions of symbols, the terms those counts hold for
    ``config`` (with biases: 4d on attention's four maps, d_ff + d on the MLP's two; 4d of norms either way)."""
    attn, mlp = (r"4d^2 + 4d", r"2d\,d_{ff} + d_{ff} + d") if config.bias else (r"4d^2", r"2d\,d_{ff}")
    block = r"4d^2 + 2d\,d_{ff} + 9d + d_{ff}" if config.bias else r"4d^2 + 2d\,d_{ff} + 4d"
    return rf"\frac{{{attn}}}{{{block}}}", rf"\frac{{{mlp}}}{{{block}}}"


def _block_terms(config: ModelConfig) -> list[tuple[str, str]]:
    """(LaTeX, plain text) of each term of one block's count for a variant (core.nn.model's switches)."""
    terms = [(r"4d^2", "4d^2") if config.w_o else (r"3d^2", "3d^2")]  # W_Q, W_K, W_V (and W_O)
    if config.mlp:
        terms.append((r"2\,d\,d_{ff}", "2*d*d_ff"))
    norms = 0 if config.norm == "none" else (4 if config.mlp else 2)
    biases = (3 + config.w_o + config.mlp) if config.bias else 0  # b_Q, b_K, b_V, b_O, b2 of d each; b1 is d_ff
    if norms + biases:
        terms.append((f"{norms + biases}d", f"{norms + biases}d"))
    if config.bias and config.mlp:
        terms.append((r"d_{ff}", "d_ff"))
    return terms


def _variant_rows(config: ModelConfig, rows: list) -> list:
    """The breakdown rows of a variant: each piece it took away says so and counts 0."""
    text = " + ".join(t for _, t in _block_terms(config)).replace("^2", "²").replace("*", "·")
    changed = {"per_block": ("one block", text)}
    if not config.w_o:
        changed["attention"] = ("attention W_Q, W_K, W_V (no W_O: the heads are not mixed) (per block)", "3·d²")
        changed["W_O"] = ("W_O: taken away", "0")
    if not config.mlp:
        changed.update(mlp=("MLP: taken away (attention only)", "0"), W1=("MLP W1: taken away", "0"),
                       W2=("MLP W2: taken away", "0"))
    if config.norm == "none" or not config.mlp:
        changed["norms"] = ("LayerNorms (per block)", "0" if config.norm == "none" else "2·d (one: no MLP to feed)")
    if config.norm != "pre":
        changed["final_norm"] = ("final LayerNorm: none " + ("(no LayerNorm anywhere)" if config.norm == "none"
                                                               else "(post-norm: the stream leaves a LayerNorm)"), "0")
    if not config.positions:
        changed["position_embedding"] = ("position table: taken away", "0")
    return [(key, *changed[key]) if key in changed else (key, label, formula) for key, label, formula in rows]


def per_block_latex(config: ModelConfig, general: bool = False) -> str:
    """The per-block count as the lecture writes it, with this config's numbers: 12d^2 + 4d when
    d_ff = 4d (unless ``general``), the general 4d^2 + 2 d d_ff + 4d otherwise; with biases (GPT-2)
    12d^2 + 13d and 4d^2 + 2 d d_ff + 9d + d_ff. LaTeX, thousands separators unspaced."""
    d, ff, n = config.d_model, config.d_ff, count_parameters(config)["per_block"]
    di, fi, total = latex_int(d), latex_int(ff), latex_int(n)
    if not config.lecture_block:  # a variant: its own terms, each with this config's numbers
        terms = _block_terms(config)
        numbers = " + ".join(t.replace("d^2", f"({di})^2").replace(r"\,d\,d_{ff}", f"({di})({fi})")
                             .replace("d_{ff}", fi).replace("d", f"({di})") for t, _ in terms)
        return " + ".join(t for t, _ in terms) + f" = {numbers} = {total}"
    if config.bias:
        if ff == 4 * d and not general:  # 4d² + 8d² + 9d + 4d: the biases' 4d + d_ff + d with d_ff = 4d
            return rf"12d^2 + 13d = 12({di})^2 + 13({di}) = {total}"
        return rf"4d^2 + 2\,d\,d_{{ff}} + 9d + d_{{ff}} = 4({di})^2 + 2({di})({fi}) + 9({di}) + {fi} = {total}"
    if ff == 4 * d and not general:
        return rf"12d^2 + 4d = 12({di})^2 + 4({di}) = {total}"
    return rf"4d^2 + 2\,d\,d_{{ff}} + 4d = 4({di})^2 + 2({di})({fi}) + 4({di}) = {total}"


def per_block_formula(config: ModelConfig) -> str:
    """The same in plain text, for a terminal."""
    d, ff, n = config.d_model, config.d_ff, count_parameters(config)["per_block"]
    if not config.lecture_block:
        return " + ".join(t for _, t in _block_terms(config)) + f" = {n:,}"
    if config.bias:
        return f"4d^2 + 2*d*d_ff + 9d + d_ff = 4*{d}^2 + 2*{d}*{ff} + 9*{d} + {ff} = {n:,}"
    if ff == 4 * d:
        return f"12d^2 + 4d = 12*{d}^2 + 4*{d} = {n:,}"
    return f"4d^2 + 2*d*d_ff + 4d = 4*{d}^2 + 2*{d}*{ff} + 4*{d} = {n:,}"
