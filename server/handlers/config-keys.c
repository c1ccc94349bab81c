/* config-keys.c: every config.json key attnbias knows, with its class, and
 * the model types it knows, with the defaults their Hugging Face config
 * classes give the keys read here.  One table: the resolver, GET /v1/models
 * and docs/models.md (compared by tests/http/test_models.py) all use it. */
#include "config.h"

#include <pthread.h>
#include <string.h>

#define H(k, d) {k, SRV_CK_HONOURED, SRV_CW_NEVER, SRV_CW_NEVER, d}
#define HR(k, r, d) {k, SRV_CK_HONOURED, SRV_CW_NEVER, r, d}
#define U(k, w, d) {k, SRV_CK_UPSTREAM, w, SRV_CW_NEVER, d}
#define R(k, r, d) {k, SRV_CK_REFUSED, SRV_CW_NEVER, r, d}
#define I(k, d) {k, SRV_CK_INERT, SRV_CW_NEVER, SRV_CW_NEVER, d}

const struct srv_ckey srv_ckeys[] = {
    /* ---- what the model is -------------------------------------------- */
    H("model_type", "the family: RoPE pairing, causality, per-layer "
                    "patterns and Hugging Face's defaults for absent keys"),
    H("text_config", "a multimodal model's language model: its keys are "
                     "read, the top level's where it lacks them"),
    /* ---- heads and widths --------------------------------------------- */
    H("head_dim", "channels per head"),
    H("hidden_size", "head_dim = hidden_size / num_attention_heads when "
                     "head_dim is absent"),
    H("n_embd", "GPT-J's hidden_size"),
    H("n_embed", "BLOOM's older spelling of hidden_size"),
    H("d_model", "T5's and MPT's hidden_size"),
    H("num_attention_heads", "query heads (/v1/bias num_heads; attention "
                             "takes them from q)"),
    H("n_head", "GPT-J's, BLOOM's and Falcon's num_attention_heads"),
    H("n_heads", "MPT's num_attention_heads"),
    H("num_heads", "T5's num_attention_heads"),
    H("num_key_value_heads", "k/v heads of GQA (attention takes them from "
                             "k and v)"),
    H("num_kv_heads", "Falcon's k/v heads (new_decoder_architecture)"),
    H("multi_query", "Falcon: one k/v head"),
    H("new_decoder_architecture", "Falcon: num_kv_heads k/v heads"),
    H("d_kv", "T5's head_dim"),
    H("qk_rope_head_dim", "DeepSeek: the rotated channels, the last of "
                          "each q/k head (rotary_dim)"),
    H("qk_nope_head_dim", "DeepSeek: the channels without RoPE, the first "
                          "of each q/k head (rotary_offset); with "
                          "qk_rope_head_dim, head_dim and the softmax scale"),
    H("v_head_dim", "DeepSeek: v's channels (attention takes them from v)"),
    H("num_hidden_layers", "bounds layer; sizes the per-layer patterns"),
    H("n_layer", "GPT-J's and BLOOM's num_hidden_layers"),
    H("n_layers", "MPT's num_hidden_layers"),
    H("num_layers", "T5's num_hidden_layers"),
    /* ---- RoPE ---------------------------------------------------------- */
    H("rope_theta", "RoPE base"),
    H("rotary_emb_base", "GPT-NeoX's rope_theta"),
    H("rope_local_base_freq", "Gemma 3: the base of the sliding-window "
                              "layers (rope_theta is the global layers')"),
    H("global_rope_theta", "ModernBERT: the base of the global layers"),
    H("local_rope_theta", "ModernBERT: the base of the local layers"),
    H("partial_rotary_factor", "rotary_dim = int(head_dim * "
                               "partial_rotary_factor)"),
    H("rotary_pct", "GPT-NeoX's partial_rotary_factor"),
    H("rotary_dim", "GPT-J: rotated channels (null: all)"),
    HR("rotary", SRV_CW_FALSE, "GPT-J: refused when false (no RoPE)"),
    H("rope_interleave", "DeepSeek-V3: adjacent pairs (2i, 2i+1), the "
                         "default; false: rotate-half"),
    H("rope_scaling", "the scaling object, every rope_type and spelling "
                      "(type, mrope, su); Gemma 3: global layers only"),
    H("rope_parameters", "transformers 5's rope_theta + rope_scaling in one "
                         "object, or one per layer type"),
    H("max_position_embeddings", "context length (yarn's and longrope's "
                                 "default factor, dynamic's original)"),
    H("n_positions", "GPT-J's max_position_embeddings (T5: inert)"),
    H("max_seq_len", "MPT's max_position_embeddings"),
    H("original_max_position_embeddings", "Phi-3: the pre-training length "
                                          "at the top level"),
    /* ---- masks and windows --------------------------------------------- */
    H("sliding_window", "window of W keys up to the query (window [W-1, 0]) "
                        "on the layers the family's pattern says"),
    H("use_sliding_window", "false turns sliding_window off (Qwen2)"),
    H("max_window_layers", "Qwen2: layers from this index on slide"),
    H("layer_types", "per layer: full_attention or sliding_attention "
                     "(other types are refused)"),
    H("sliding_window_pattern", "Gemma 3: every n-th layer is global"),
    H("_sliding_window_pattern", "later spelling of sliding_window_pattern"),
    H("local_attention", "ModernBERT: the local layers see local_attention/2 "
                         "keys on each side"),
    H("global_attn_every_n_layers", "ModernBERT: layers 0, n, 2n, ... are "
                                    "global"),
    H("is_decoder", "T5: decoder self-attention (causal, one-directional "
                    "buckets); else the encoder"),
    /* ---- scores -------------------------------------------------------- */
    H("attn_logit_softcapping", "softcap (null: off)"),
    H("query_pre_attn_scalar", "scale = query_pre_attn_scalar^-0.5 (Gemma)"),
    /* ---- biases -------------------------------------------------------- */
    H("relative_attention_num_buckets", "T5 buckets"),
    H("relative_attention_max_distance", "T5: distance of the last bucket"),
    H("attn_config", "MPT's attention settings (its members below)"),
    HR("attn_config.alibi", SRV_CW_FALSE,
       "MPT: ALiBi; false is refused (positions attnbias does not take "
       "from an MPT config)"),
    H("attn_config.alibi_bias_max", "MPT: ALiBi's max_bias"),
    H("attn_config.softmax_scale", "MPT: scale (null: 1/sqrt(head_dim))"),
    H("attn_config.attn_type", "MPT: multihead, multiquery or grouped "
                               "query attention (k/v heads)"),
    H("attn_config.kv_n_heads", "MPT: k/v heads of grouped query attention"),
    R("alibi", SRV_CW_TRUE,
      "Falcon: ALiBi added before the 1/sqrt(head_dim) scale -- refused "
      "when true"),
    R("attn_config.prefix_lm", SRV_CW_TRUE,
      "MPT: prefix-LM masks -- refused when true"),
    R("attn_config.attn_uses_sequence_id", SRV_CW_TRUE,
      "MPT: masks between packed sequences -- refused when true"),
    R("attention_chunk_size", SRV_CW_ANY,
      "chunked local attention (Llama 4) -- refused when set"),
    /* ---- upstream: applied to q, k, v before attention ----------------- */
    U("attention_bias", SRV_CW_TRUE, "bias of the q/k/v projections"),
    U("qkv_bias", SRV_CW_TRUE, "bias of the q/k/v projections"),
    U("bias", SRV_CW_TRUE, "Falcon: bias of the linear layers"),
    U("no_bias", SRV_CW_FALSE, "MPT: false means biased projections"),
    U("qk_layernorm", SRV_CW_TRUE, "LayerNorm of q and k"),
    U("use_qk_norm", SRV_CW_TRUE, "RMSNorm of q and k"),
    U("attn_config.qk_ln", SRV_CW_TRUE, "MPT: LayerNorm of q and k"),
    U("attn_config.clip_qkv", SRV_CW_ANY, "MPT: q, k, v clamped"),
    U("clip_qkv", SRV_CW_ANY, "q, k, v clamped"),
    U("q_lora_rank", SRV_CW_ANY, "DeepSeek: low-rank q projection"),
    U("kv_lora_rank", SRV_CW_ANY,
      "DeepSeek: compressed k/v; the rotated part of k is shared by the "
      "heads"),
    /* ---- inert: no bearing on positions or attention scores ----------- */
    I("_name_or_path", "the checkpoint's name"),
    I("architectures", "the model classes"),
    I("auto_map", "remote-code classes"),
    I("transformers_version", "library version"),
    I("torch_dtype", "weights' dtype"),
    I("dtype", "weights' dtype"),
    I("use_cache", "generation"),
    I("cache_implementation", "generation"),
    I("tie_word_embeddings", "embeddings"),
    I("vocab_size", "vocabulary"),
    I("bos_token_id", "token ids"),
    I("eos_token_id", "token ids"),
    I("pad_token_id", "token ids"),
    I("unk_token_id", "token ids"),
    I("sep_token_id", "token ids"),
    I("cls_token_id", "token ids"),
    I("decoder_start_token_id", "token ids"),
    I("image_token_id", "token ids"),
    I("video_token_id", "token ids"),
    I("vision_start_token_id", "token ids"),
    I("vision_end_token_id", "token ids"),
    I("vision_token_id", "token ids"),
    I("image_token_index", "token ids"),
    I("boi_token_index", "token ids"),
    I("eoi_token_index", "token ids"),
    I("mm_tokens_per_image", "image tokens"),
    I("tokenizer_class", "tokenizer"),
    I("vision_config", "the vision tower (attnbias reads the language "
                       "model)"),
    I("intermediate_size", "MLP"),
    I("n_inner", "MLP"),
    I("d_ff", "MLP"),
    I("ffn_hidden_size", "MLP"),
    I("expansion_ratio", "MLP"),
    I("mlp_bias", "MLP"),
    I("hidden_act", "MLP"),
    I("hidden_activation", "MLP"),
    I("activation_function", "MLP"),
    I("activation", "MLP"),
    I("feed_forward_proj", "MLP"),
    I("dense_act_fn", "MLP"),
    I("is_gated_act", "MLP"),
    I("rms_norm_eps", "residual-stream norms"),
    I("layer_norm_eps", "residual-stream norms"),
    I("layer_norm_epsilon", "residual-stream norms"),
    I("norm_eps", "residual-stream norms"),
    I("norm_bias", "residual-stream norms"),
    I("norm_type", "residual-stream norms"),
    I("apply_residual_connection_post_layernorm", "residual stream"),
    I("use_parallel_residual", "residual stream"),
    I("parallel_attn", "residual stream"),
    I("num_ln_in_parallel_attn", "residual stream"),
    I("final_logit_softcapping", "the LM head's logits, not attention's"),
    I("logit_scale", "the LM head's logits"),
    I("attention_dropout", "training"),
    I("attention_probs_dropout_prob", "training"),
    I("hidden_dropout", "training"),
    I("hidden_dropout_prob", "training"),
    I("resid_pdrop", "training"),
    I("embd_pdrop", "training"),
    I("emb_pdrop", "training"),
    I("attn_pdrop", "training"),
    I("dropout_rate", "training"),
    I("classifier_dropout", "training"),
    I("embedding_dropout", "training"),
    I("mlp_dropout", "training"),
    I("initializer_range", "training"),
    I("initializer_factor", "training"),
    I("init_device", "training"),
    I("pretraining_tp", "tensor-parallel training"),
    I("gradient_checkpointing", "training"),
    I("bias_dropout_fusion", "fused kernels"),
    I("masked_softmax_fusion", "fused kernels"),
    I("attention_softmax_in_fp32", "fused kernels (attnbias: float32)"),
    I("slow_but_exact", "fused kernels"),
    I("skip_bias_add", "fused kernels"),
    I("skip_bias_add_qkv", "fused kernels"),
    I("offset_alibi", "BLOOM: unused by the model"),
    I("embedding_fraction", "training"),
    I("learned_pos_emb", "MPT: unused by Hugging Face's MPT (ALiBi only)"),
    I("scale_attn_weights", "GPT-J always scales by 1/sqrt(head_dim)"),
    I("attn_config.attn_impl", "kernel choice"),
    I("attn_config.attn_pdrop", "training"),
    I("is_encoder_decoder", "T5: both stacks exist"),
    I("num_decoder_layers", "T5: decoder depth"),
    I("task_specific_params", "generation"),
    I("num_local_experts", "MoE MLP"),
    I("num_experts_per_tok", "MoE MLP"),
    I("router_aux_loss_coef", "MoE MLP"),
    I("router_jitter_noise", "MoE MLP"),
    I("output_router_logits", "MoE MLP"),
    I("n_routed_experts", "MoE MLP"),
    I("n_shared_experts", "MoE MLP"),
    I("moe_intermediate_size", "MoE MLP"),
    I("moe_layer_freq", "MoE MLP"),
    I("first_k_dense_replace", "MoE MLP"),
    I("n_group", "MoE MLP"),
    I("topk_group", "MoE MLP"),
    I("topk_method", "MoE MLP"),
    I("norm_topk_prob", "MoE MLP"),
    I("routed_scaling_factor", "MoE MLP"),
    I("scoring_func", "MoE MLP"),
    I("aux_loss_alpha", "MoE MLP"),
    I("seq_aux", "MoE MLP"),
    I("ep_size", "MoE MLP"),
    I("num_nextn_predict_layers", "multi-token prediction head"),
    I("quantization_config", "weights' storage"),
};
const int srv_nckeys = (int)(sizeof srv_ckeys / sizeof srv_ckeys[0]);

const struct srv_ckey *srv_ckey_find(const char *key)
{
  int i;

  for (i = 0; i < srv_nckeys; i++)
    if (strcmp(srv_ckeys[i].key, key) == 0)
      return &srv_ckeys[i];
  return NULL;
}

const char *srv_ckey_class_name(enum srv_ckey_class c)
{
  switch (c) {
  case SRV_CK_HONOURED: return "honoured";
  case SRV_CK_UPSTREAM: return "upstream";
  case SRV_CK_REFUSED: return "refused";
  case SRV_CK_INERT: return "inert";
  }
  return "?";
}

const char *srv_ckey_when_name(enum srv_ckey_when w)
{
  switch (w) {
  case SRV_CW_NEVER: return NULL;
  case SRV_CW_ANY: return "set";
  case SRV_CW_TRUE: return "true";
  case SRV_CW_FALSE: return "false";
  }
  return NULL;
}

/* ---- families ------------------------------------------------------------
 * defaults: the values Hugging Face's configuration class gives the keys
 * the resolver reads, for a config that omits them. */

const struct srv_family srv_families[] = {
    {"llama", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_ALL,
     "{\"rope_theta\": 10000.0, \"max_position_embeddings\": 2048}", NULL,
     "Llama 1-3: rotate-half RoPE, causal"},
    {"mistral", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_ALL,
     "{\"rope_theta\": 10000.0, \"sliding_window\": 4096, "
     "\"max_position_embeddings\": 131072}",
     NULL, "Mistral: sliding_window on every layer"},
    {"mixtral", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_ALL,
     "{\"rope_theta\": 1000000.0, \"sliding_window\": null, "
     "\"max_position_embeddings\": 131072}",
     NULL, "Mixtral: sliding_window on every layer when set"},
    {"qwen2", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_QWEN2,
     "{\"rope_theta\": 10000.0, \"use_sliding_window\": false, "
     "\"sliding_window\": 4096, \"max_window_layers\": 28, "
     "\"max_position_embeddings\": 32768}",
     NULL, "Qwen2: sliding window from max_window_layers on, if enabled"},
    {"qwen2_vl", "qwen2_vl_text", SRV_POS_ROPE, 0, 1, SRV_LP_QWEN2,
     "{\"rope_theta\": 1000000.0, \"use_sliding_window\": false, "
     "\"sliding_window\": 4096, \"max_window_layers\": 80, "
     "\"max_position_embeddings\": 32768}",
     NULL, "Qwen2-VL: multi-axis RoPE (mrope_section), positions [3, n]"},
    {"qwen2_5_vl", "qwen2_5_vl_text", SRV_POS_ROPE, 0, 1, SRV_LP_QWEN2,
     "{\"rope_theta\": 1000000.0, \"use_sliding_window\": false, "
     "\"sliding_window\": 4096, \"max_window_layers\": 80, "
     "\"max_position_embeddings\": 32768}",
     NULL, "Qwen2.5-VL: multi-axis RoPE (mrope_section), positions [3, n]"},
    {"phi3", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_ALL,
     "{\"rope_theta\": 10000.0, \"partial_rotary_factor\": 1.0, "
     "\"max_position_embeddings\": 4096, "
     "\"original_max_position_embeddings\": 4096, \"sliding_window\": null}",
     NULL, "Phi-3: LongRoPE (su, longrope) and a sliding window"},
    {"gemma", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_ALL,
     "{\"rope_theta\": 10000.0, \"head_dim\": 256, "
     "\"max_position_embeddings\": 8192}",
     NULL, "Gemma"},
    {"gemma2", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_GEMMA2,
     "{\"rope_theta\": 10000.0, \"head_dim\": 256, "
     "\"query_pre_attn_scalar\": 256, \"attn_logit_softcapping\": 50.0, "
     "\"sliding_window\": 4096, \"max_position_embeddings\": 8192}",
     NULL,
     "Gemma 2: even layers slide, soft-capped scores, "
     "query_pre_attn_scalar"},
    {"gemma3", "gemma3_text", SRV_POS_ROPE, 0, 1, SRV_LP_GEMMA3,
     "{\"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, "
     "\"head_dim\": 256, \"query_pre_attn_scalar\": 256, "
     "\"sliding_window\": 4096, \"sliding_window_pattern\": 6, "
     "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
     "\"num_hidden_layers\": 26, \"hidden_size\": 2304, "
     "\"max_position_embeddings\": 131072}",
     "q_norm,k_norm",
     "Gemma 3: five sliding layers to one global, each with its own base; "
     "QK-norm"},
    {"deepseek_v2", NULL, SRV_POS_ROPE, 1, 1, SRV_LP_ALL,
     "{\"rope_theta\": 10000.0, \"qk_rope_head_dim\": 64, "
     "\"qk_nope_head_dim\": 128, \"v_head_dim\": 128, "
     "\"max_position_embeddings\": 2048}",
     NULL,
     "DeepSeek-V2: heads [nope | rope], RoPE on the last qk_rope_head_dim "
     "channels in adjacent pairs, YaRN with mscale on the softmax scale"},
    {"deepseek_v3", NULL, SRV_POS_ROPE, 1, 1, SRV_LP_ALL,
     "{\"rope_theta\": 10000.0, \"qk_rope_head_dim\": 64, "
     "\"qk_nope_head_dim\": 128, \"v_head_dim\": 128, "
     "\"rope_interleave\": true, \"max_position_embeddings\": 4096}",
     NULL,
     "DeepSeek-V3: as V2; rope_interleave chooses the pairing"},
    {"gptj", NULL, SRV_POS_ROPE, 1, 1, SRV_LP_ALL,
     "{\"rotary_dim\": 64, \"n_positions\": 2048}", NULL,
     "GPT-J: rotary_dim channels, adjacent pairs"},
    {"gpt_neox", NULL, SRV_POS_ROPE, 0, 1, SRV_LP_ALL,
     "{\"rotary_pct\": 0.25, \"rotary_emb_base\": 10000, "
     "\"max_position_embeddings\": 2048}",
     NULL, "GPT-NeoX, Pythia: rotary_pct of each head, rotate-half"},
    {"falcon", "RefinedWebModel,RefinedWeb", SRV_POS_ROPE, 0, 1, SRV_LP_ALL,
     "{\"rope_theta\": 10000.0, \"alibi\": false, \"multi_query\": true, "
     "\"max_position_embeddings\": 2048}",
     NULL, "Falcon: rotate-half RoPE (its ALiBi variant is refused)"},
    {"bloom", NULL, SRV_POS_ALIBI, 0, 1, SRV_LP_ALL, "{}", NULL,
     "BLOOM: ALiBi, causal"},
    {"mpt", NULL, SRV_POS_ALIBI, 0, 1, SRV_LP_ALL,
     "{\"attn_config\": {\"alibi\": true, \"alibi_bias_max\": 8}}", NULL,
     "MPT: ALiBi with alibi_bias_max, causal"},
    {"t5", "mt5", SRV_POS_T5, 0, -1, SRV_LP_ALL,
     "{\"relative_attention_num_buckets\": 32, "
     "\"relative_attention_max_distance\": 128, \"is_decoder\": false, "
     "\"d_kv\": 64, \"num_heads\": 8}",
     NULL,
     "T5: relative buckets, unscaled scores; encoder both ways, decoder "
     "causal"},
    {"modernbert", NULL, SRV_POS_ROPE, 0, 0, SRV_LP_MODERNBERT,
     "{\"global_rope_theta\": 160000.0, \"local_rope_theta\": 10000.0, "
     "\"local_attention\": 128, \"global_attn_every_n_layers\": 3, "
     "\"max_position_embeddings\": 8192}",
     NULL,
     "ModernBERT: bidirectional; every third layer global, the others see "
     "local_attention/2 keys each side with their own base"},
};
const int srv_nfamilies = (int)(sizeof srv_families / sizeof srv_families[0]);

static int alias_of(const char *list, const char *name)
{
  size_t n = strlen(name);

  while (list && *list) {
    const char *end = strchr(list, ',');
    size_t len = end ? (size_t)(end - list) : strlen(list);
    if (len == n && strncmp(list, name, n) == 0)
      return 1;
    list = end ? end + 1 : NULL;
  }
  return 0;
}

const struct srv_family *srv_family_find(const char *model_type)
{
  int i;

  for (i = 0; model_type && i < srv_nfamilies; i++)
    if (strcmp(srv_families[i].model_type, model_type) == 0 ||
        alias_of(srv_families[i].aliases, model_type))
      return &srv_families[i];
  return NULL;
}

const char *srv_pos_kind_name(enum srv_pos_kind k)
{
  switch (k) {
  case SRV_POS_ROPE: return "rope";
  case SRV_POS_ALIBI: return "alibi";
  case SRV_POS_T5: return "t5";
  default: return "unknown";
  }
}

/* Parsed once, for every thread; never freed (static references). */
static json_t *g_defaults[sizeof srv_families / sizeof srv_families[0]];
static pthread_once_t g_defaults_once = PTHREAD_ONCE_INIT;

static void parse_defaults(void)
{
  int i;

  for (i = 0; i < srv_nfamilies; i++)
    g_defaults[i] = json_loads(srv_families[i].defaults, 0, NULL);
}

const json_t *srv_family_defaults(const struct srv_family *f)
{
  pthread_once(&g_defaults_once, parse_defaults);
  return f ? g_defaults[f - srv_families] : NULL;
}
