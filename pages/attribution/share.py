"""The Attribution page's link, its nodes by stable names held until the graph is built (ui.links.hold), and export."""
import streamlit as st
from core.analysis import graph_json as GJ
from core.analysis.supernodes import switched_off
from core.serve.links import Field, LinkSpec
from ui.links import hold, link_box, say_ignored, take, use_link


def read_link(tok, n_ctx: int) -> LinkSpec:
    spec = LinkSpec({"prompt": Field(("prompt", tok, n_ctx), "attr_prompt", cut=True),
                     "share": Field(("float", 0.5, 0.99), "attr_nodes"), "cap": Field(("int", 1, 10**7), "attr_cap"),
                     "output": Field(("int", 0, 10**9)), "node": Field(("text", 40)), "off": Field(("text", 480))})
    hold(use_link(spec), ("output", "node", "off"))
    return spec


def apply_output(choices: list[int], token_text) -> list[int]:
    why = None if (token := take("output")) is None else GJ.link_output(token, choices, token_text)
    st.session_state.update({"attr_token": token} if token is not None and not why else {})
    say_ignored([("output", why)] if why else [])
    return choices


def apply_nodes(g, pickable: list[dict]):
    i, pinned, ignored = GJ.link_nodes(g, take("node"), off := take("off"), pickable)
    st.session_state.update({"attr_node": i} if i is not None else {}, **({"attr_pinned": pinned} if off else {}))
    say_ignored(ignored)


def share_row(spec, g, pr, token_text, model_name: str, prompt: str, explain: int, share: float, selected: int,
              groups=()):
    # a group switched off is written as its members (a link and circuit-tracer's file name graph nodes only)
    pinned = switched_off(st.session_state.get("attr_pinned") or [], list(groups))
    link_box(spec, {"output": explain, "node": GJ.node_name(g, selected),
                    "off": ",".join(GJ.node_name(g, i) for i in pinned) or None})
    st.download_button("Download the graph (circuit-tracer's JSON)", lambda: GJ.graph_file(
        g, pr, token_text, model_name, prompt, explain, share, selected, pinned), GJ.slug_for(model_name, g.ids, explain)
        + ".json", "application/json", key="attr_download", on_click="ignore", icon=":material/download:",
        help="What circuit-tracer's local viewer and Neuronpedia read (the README says how to open it).")
