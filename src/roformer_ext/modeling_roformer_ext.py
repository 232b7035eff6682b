"""RoFormerExt (BERT / WoBERT with rotary position embedding) on transformers 5: base model and heads; layers are in
`modeling_roformer_ext_layers.py`. RoFormer-V2 is the same code with `use_bias=False`, `norm_type="rms_scale_free"`."""

import copy
import os
import shutil
import sys

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.dynamic_module_utils import get_relative_import_files
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_masks_for_generate
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .attention_plan import AttentionPlan, BatchLayout, make_attention_plan
from .compat import CACHE, accepts_old_cache_name, auto_class, cache_field, output_cache, parent_init_weights
from .configuration_roformer_ext import RoFormerExtConfig
from .hub_code import SharedCodeMixin
from .linear_attention import use_state_layers
from .masking_roformer_ext import check_padding_mask, is_first_call, self_attention_cache
from .modeling_roformer_ext_layers import (
    RoFormerExtAttention,
    RoFormerExtClassificationHead,
    RoFormerExtCrossAttention,
    RoFormerExtEmbeddings,
    RoFormerExtLayer,
    RoFormerExtLMHead,
    RoFormerExtPooler,
)
from .packing import PackedBatch, describe_packed_batch, end_to_end, unpack
from .position_encodings import position_encoding_class
from .positions import as_axes_batch_seq, text_position_ids
from .rope import RotaryEmbedding
from .self_check import ensure_compatible


def _defining_class(cls: type) -> type:
    """The model class a wrapper subclassed (FSDP2's `fully_shard` makes an `FSDP<name>` subclass in torch)."""
    return next(c for c in cls.__mro__ if not c.__module__.startswith("torch."))


@auto_docstring
class RoFormerExtPreTrainedModel(SharedCodeMixin, PreTrainedModel):
    config: RoFormerExtConfig
    config_class = RoFormerExtConfig
    base_model_prefix = "roformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["RoFormerExtLayer"]
    _skip_keys_device_placement = [CACHE]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _can_record_outputs = {
        "hidden_states": RoFormerExtLayer,
        "attentions": RoFormerExtAttention,
        "cross_attentions": RoFormerExtCrossAttention,
    }
    #: Written to `auto_map` on save: one saved folder serves every Auto class (transformers writes only its own).
    auto_map_family = {"AutoModel": "modeling_roformer_ext.RoFormerExtModel"} | {
        f"AutoModelFor{head}": f"modeling_roformer_ext.RoFormerExtFor{head}"
        for head in "MaskedLM CausalLM SequenceClassification TokenClassification QuestionAnswering MultipleChoice".split()
    }

    def build_base_model(self, config: RoFormerExtConfig, add_pooling_layer: bool = True) -> "RoFormerExtModel":
        return RoFormerExtModel(config, add_pooling_layer=add_pooling_layer)

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        """transformers resizes the embeddings and the tied decoder; our LM head's own bias follows."""
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        lm_head = getattr(self, "lm_head", None)
        if isinstance(lm_head, RoFormerExtLMHead):
            lm_head.resize_bias(embeddings.num_embeddings)
        return embeddings

    @staticmethod
    def describe_batch(
        tokens: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        kwargs: dict,
        past_length: int | torch.Tensor = 0,
    ) -> PackedBatch | None:
        """The packed-batch description, made once (by a pooling head, handed down as `packed_batch`, or here)."""
        if "packed_batch" in kwargs:
            return kwargs.pop("packed_batch")
        given = {name: kwargs.pop(name, None) for name in _PACKING_INPUTS}
        cu_seq_lens = given["cu_seq_lens_q"], given["cu_seq_lens_k"], given["seq_idx"]
        return describe_packed_batch(*tokens.shape[:2], attention_mask, position_ids, past_length, *cu_seq_lens)

    def encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs):
        """A head's call of its base model, outputs as a dataclass whatever the config's `return_dict`."""
        return self.roformer(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        """The attention plan looks the backend up in `ALL_ATTENTION_FUNCTIONS` at every forward."""
        return True

    @classmethod
    def is_remote_code(cls) -> bool:
        """A wrapper's generated subclass (FSDP2's, defined in torch) is not remote code: its model's class is."""
        return auto_class(cls) is not None and _defining_class(cls) is cls

    def save_pretrained(self, save_directory, *args, **kwargs):
        if auto_class(self) is None:
            return super().save_pretrained(save_directory, *args, **kwargs)
        # registered for remote code (importing roformer_ext does that): one folder serves every head of the family
        self.config.auto_map = {**self.auto_map_family, **(getattr(self.config, "auto_map", None) or {})}
        defining = _defining_class(type(self))
        if defining is not type(self) and self.should_save_on_this_rank(kwargs.get("is_main_process", True)):
            # the wrapped model's own class and files, written before transformers saves (and maybe pushes) the folder
            module = sys.modules[defining.__module__]
            self.config.auto_map[auto_class(defining)] = f"{module.__name__.rsplit('.', 1)[-1]}.{defining.__name__}"
            os.makedirs(save_directory, exist_ok=True)
            for source in (module.__file__, *get_relative_import_files(module.__file__)):
                shutil.copyfile(source, os.path.join(save_directory, os.path.basename(source)))
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        hook = getattr(module, "init_position_weights", None)
        if callable(hook):
            # a position plugin's own parameters and buffers (ALiBi's slopes, a rotary's frequencies): not the base
            # class's, which looks rotary kinds up in transformers' registry, lacking ours
            hook(self.config)
            return
        parent_init_weights(super(), module)
        if isinstance(module, RoFormerExtLMHead) and module.bias is not None:
            init.zeros_(module.bias)


#: What callers (DataCollatorWithFlattening) give to describe packed rows; read once by `describe_batch`.
_PACKING_INPUTS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")


@auto_docstring
class RoFormerExtModel(RoFormerExtPreTrainedModel):
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\.", r"^classifier\.", r"^qa_outputs\."]  # a head's folder

    def __init__(self, config: RoFormerExtConfig, add_pooling_layer: bool = True) -> None:
        r"""
        add_pooling_layer (`bool`, *optional*, defaults to `True`):
            Build the pooler when `config.pooler_activation` is set.
        """
        # fields set after construction (from_pretrained(path, x=...), config.x = ...) are checked once per model
        config.validate_fields()
        super().__init__(config)
        self.embeddings = RoFormerExtEmbeddings(config)
        self.layers = nn.ModuleList([RoFormerExtLayer(config, i) for i in range(config.num_hidden_layers)])
        self.position_encoding = position_encoding_class(config.position_encoding)(config)
        use_pooler = add_pooling_layer and config.pooler_activation is not None
        self.pooler = RoFormerExtPooler(config) if use_pooler else None
        self.gradient_checkpointing = False
        self.post_init()

    @property
    def rotary_emb(self) -> RotaryEmbedding | None:
        """The rope encoding's rotary embedding; None for other encodings."""
        return getattr(self.position_encoding, "rotary_emb", None)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def prepare_cache(
        self, cache: Cache | None, use_cache: bool | None, encoder_hidden_states: torch.Tensor | None
    ) -> Cache | None:
        """The cache this call writes to; none under gradient checkpointing (its replay would write twice)."""
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return None
        if self.config.is_decoder and cache is None:
            if not (use_cache if use_cache is not None else self.config.use_cache):
                return None
            cache = DynamicCache(config=self.config)
            if encoder_hidden_states is not None:
                cache = EncoderDecoderCache(cache, DynamicCache(config=self.config))
        if cache is not None and self.config.attention_type == "linear":
            use_state_layers(self_attention_cache(cache), self.config.num_hidden_layers)
        return cache

    def batch_layout(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        cache: Cache | None,
        use_cache: bool | None,
        encoder_hidden_states: torch.Tensor | None,
        kwargs: dict,
    ) -> BatchLayout:
        """Cache, cached length, packed rows: decided once per forward (or handed down by the vision-text model)."""
        if "batch_layout" in kwargs:
            return kwargs.pop("batch_layout")
        cache = self.prepare_cache(cache, use_cache, encoder_hidden_states)
        self_cache = self_attention_cache(cache)
        past_length = self_cache.get_seq_length() if self_cache is not None else 0
        check_padding_mask(attention_mask, tokens.shape[0], past_length + tokens.shape[1])
        packed = self.describe_batch(tokens, attention_mask, position_ids, kwargs, past_length)
        return BatchLayout(cache, self_cache, past_length, packed)

    def attention_plan(self, layout: BatchLayout, *args) -> AttentionPlan:
        """The forward's one attention plan (`attention_plan.make_attention_plan`) from this model's config."""
        return make_attention_plan(self.config, self.position_encoding, layout, *args, training=self.training)

    def unilm_token_type_ids(
        self,
        token_type_ids: torch.Tensor | None,
        past_length: int,
        batch: int,
        seq: int,
        device: torch.device,
        prompt_length: int | None = None,
    ) -> torch.Tensor | None:
        """A UniLM decoder's segments: a prompt is the source (0), tokens after a cache or from `prompt_length` on the
        target (1; assisted drafts get the prompt's last type); a source token after a cache is refused."""
        if self.config.decoder_attention != "unilm":
            return token_type_ids
        first_call = is_first_call(past_length)
        if token_type_ids is None:
            return torch.full((batch, seq), 0 if first_call else 1, dtype=torch.long, device=device)
        if prompt_length is not None:
            index = past_length + torch.arange(seq, device=token_type_ids.device)
            token_type_ids = token_type_ids.masked_fill(index >= prompt_length, 1)
        if not first_call and not torch.compiler.is_compiling() and bool((token_type_ids == 0).any()):
            raise ValueError(
                "A UniLM decoder takes no source tokens (token_type_ids 0) after a cache: the cached source tokens "
                "were computed without seeing them (nor a source split over several calls, as prefill_chunk_size "
                "does). Give the tokens after the cache token_type_ids 1 (the target), or run the whole sequence "
                "without the cache to make more of it the source (generate does so itself)."
            )
        return token_type_ids

    @accepts_old_cache_name
    @merge_with_config_defaults
    @capture_outputs
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        prompt_length: int | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)` or `(axes, batch_size, sequence_length)`, *optional*):
            Positions fed to the rotary embedding; integer or float. Defaults to 0, 1, 2, ... (after the cached
            tokens). Multi-axis positions (images, video) come from `roformer_ext.positions.build_position_ids`.
        cache (`Cache`, *optional*):
            A decoder's KV cache (transformers' `Cache`); `past_key_values`, its name before transformers 5.24, is
            accepted too.
        prompt_length (`int`, *optional*):
            A UniLM decoder's generated tokens start here (cached tokens counted): they are the target
            (`token_type_ids` 1) whatever types they were given. `generate` sets it to the prompt's length.
        """
        ensure_compatible(RoFormerExtForCausalLM)  # outside the tested transformers range: the self-check
        check_token_inputs(input_ids, inputs_embeds)
        if encoder_hidden_states is not None and not self.config.add_cross_attention:
            raise ValueError(
                "encoder_hidden_states were given but this model has no cross-attention; build it with "
                "is_decoder=True, add_cross_attention=True (as EncoderDecoderModel does for its decoder)."
            )
        tokens = input_ids if input_ids is not None else inputs_embeds
        batch, seq = tokens.shape[:2]
        layout = self.batch_layout(
            tokens, attention_mask, position_ids, cache, use_cache, encoder_hidden_states, kwargs
        )
        token_type_ids = self.unilm_token_type_ids(
            token_type_ids, layout.past_length, batch, seq, tokens.device, prompt_length
        )
        # Cached keys are numbered as the queries are: over the mask's real tokens where the caller numbered the
        # queries (generate does, from the mask), by slot where the positions are the default ones.
        keys_numbered_by = attention_mask if position_ids is not None else None
        axes = self.config.rope_parameters["axes"]
        if position_ids is None and layout.packed is not None:
            position_ids = layout.packed.positions()  # restarting at each packed sequence
        if position_ids is None:
            position_ids = text_position_ids(batch, seq, layout.past_length, axes, tokens.device)
        position_ids = as_axes_batch_seq(position_ids, axes, batch, seq)
        embeddings = self.embeddings(input_ids, token_type_ids, inputs_embeds, self.position_encoding, position_ids[0])
        plan = self.attention_plan(
            layout,
            embeddings,
            position_ids,
            attention_mask,
            token_type_ids,
            keys_numbered_by,
            encoder_hidden_states,
            encoder_attention_mask,
        )
        hidden_states = embeddings
        for layer in self.layers:
            hidden_states = layer(hidden_states, plan.mask, plan, encoder_hidden_states, **kwargs)
        pooled = self.pooler(hidden_states) if self.pooler is not None else None
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden_states,
            pooler_output=pooled,
            **cache_field(layout.cache if self.config.is_decoder else None),
        )


def check_token_inputs(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> None:
    """Clear errors for the inputs that otherwise fail deep inside a reshape."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
    if input_ids is not None and (input_ids.dim() != 2 or input_ids.shape[1] == 0):
        raise ValueError(
            f"input_ids must have shape (batch, seq) with seq >= 1; got {tuple(input_ids.shape)}. "
            "Add a batch axis with input_ids[None] (a tokenizer with return_tensors='pt' gives this shape)."
        )
    if input_ids is not None and input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"input_ids must hold integer token ids as torch.long (or torch.int32); got dtype {input_ids.dtype}. "
            "Convert with input_ids.long() (or pass vectors as inputs_embeds)."
        )
    if inputs_embeds is not None and (inputs_embeds.dim() != 3 or inputs_embeds.shape[1] == 0):
        raise ValueError(
            f"inputs_embeds must have shape (batch, seq, embedding_size) with seq >= 1; got {tuple(inputs_embeds.shape)}."
        )


class LMHeadMixin:
    """The LM heads' decoder, tied to the word embeddings (vocabulary-sharded under tensor parallel, whole under FSDP2)."""

    _tied_weights_keys = {"lm_head.decoder.weight": "roformer.embeddings.word_embeddings.weight"}
    _tp_plan = {"lm_head.decoder": "colwise_gather_output"}
    _fsdp_plan = {"lm_head.decoder": "keep_full_weight"}

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings


@auto_docstring
class RoFormerExtForMaskedLM(LMHeadMixin, RoFormerExtPreTrainedModel):
    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.roformer = self.build_base_model(config)  # keeps RoFormer-Sim's pooler when pooler_activation is set
        self.lm_head = RoFormerExtLMHead(config)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput:
        outputs = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        hidden_states = outputs.last_hidden_state
        if self.config.sparse_prediction and labels is not None:  # project only the predicted positions
            predicted = labels != self.config.sparse_pred_ignore_index
            hidden_states, labels = hidden_states[predicted], labels[predicted]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:  # transformers' loss: normalised by num_items_in_batch under gradient accumulation
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class RoFormerExtForCausalLM(LMHeadMixin, RoFormerExtPreTrainedModel, GenerationMixin):
    """Decoder-only RoFormer (the roformer-gpt release): causal attention, KV cache, `generate`."""

    # A RoFormer-Sim folder carries its retrieval pooler, which generation does not use.
    _keys_to_ignore_on_load_unexpected = [r"^roformer\.pooler\."]

    def __init__(self, config: RoFormerExtConfig) -> None:
        if not config.is_decoder:  # a copy: the caller's config may build encoders too
            config = copy.deepcopy(config)
            config.is_decoder = True
        super().__init__(config)
        self.roformer = self.build_base_model(config, add_pooling_layer=False)
        self.lm_head = RoFormerExtLMHead(config)
        self.post_init()

    def create_masks_for_generate(self, config, inputs_embeds, attention_mask, **kwargs):
        """generate() prepares masks ahead for static caches; a UniLM decoder builds its own from token types."""
        if self.config.decoder_attention == "unilm":
            return attention_mask
        return create_masks_for_generate(
            config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, **kwargs
        )

    def generate(self, inputs: torch.Tensor | None = None, *args, **kwargs):
        """A UniLM decoder's segments made explicit, so every step sees the same ones; source tokens after a given cache
        were never seen by it: the cache is left unused."""
        prompt = kwargs.get("inputs_embeds")
        prompt = prompt if prompt is not None else inputs if inputs is not None else kwargs.get("input_ids")
        if self.config.decoder_attention == "unilm" and prompt is not None:
            cache_name = CACHE if kwargs.get(CACHE) is not None else "past_key_values"
            cached = int(kwargs[cache_name].get_seq_length()) if kwargs.get(cache_name) is not None else 0
            token_type_ids = kwargs.get("token_type_ids")
            if token_type_ids is None:
                token_type_ids = torch.zeros(prompt.shape[:2], dtype=torch.long, device=prompt.device)
                token_type_ids[:, cached if cached else prompt.shape[1] :] = 1
            elif cached and bool((token_type_ids[:, cached:] == 0).any()):
                kwargs[cache_name] = None
            kwargs["token_type_ids"] = token_type_ids
            kwargs.setdefault("prompt_length", prompt.shape[1])  # an assistant's generate keeps the main prompt's
        return super().generate(inputs, *args, **kwargs)

    @accepts_old_cache_name
    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        prompt_length: int | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithCrossAttentions:
        r"""
        cache (`Cache`, *optional*):
            The KV cache (transformers' `Cache`); `past_key_values`, its name before transformers 5.24, is accepted
            too.
        prompt_length (`int`, *optional*):
            A UniLM decoder's generated tokens start here (cached tokens counted): they are the target
            (`token_type_ids` 1) whatever types they were given. `generate` sets it to the prompt's length.
        """
        outputs = self.encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            cache=cache,
            use_cache=use_cache,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            prompt_length=prompt_length,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden_states = hidden_states[:, -logits_to_keep:]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            **cache_field(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            cross_attentions=outputs.cross_attentions,
        )


@auto_docstring
class RoFormerExtForSequenceClassification(RoFormerExtPreTrainedModel):
    # Per-example mean loss: Trainer must divide it under gradient accumulation itself.
    accepts_loss_kwargs = False

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roformer = self.build_base_model(config, add_pooling_layer=False)
        self.classifier = RoFormerExtClassificationHead(config)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        tokens = input_ids if input_ids is not None else inputs_embeds
        packed = self.describe_batch(tokens, attention_mask, position_ids, kwargs)
        if packed is not None and labels is not None and (labels.dim() == 0 or labels.shape[0] != packed.num_sequences):
            raise ValueError(
                f"A packed batch of {packed.num_sequences} sequences needs one label per packed sequence; got labels of "
                f"shape {tuple(labels.shape)}. transformers' DataCollatorWithFlattening turns a class label into token "
                "labels for language modelling: use roformer_ext.DataCollatorForPackedClassification instead."
            )
        outputs = self.encode(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, packed_batch=packed, **kwargs
        )
        pooled = self.pool(outputs.last_hidden_state, attention_mask, packed)
        logits = self.classifier(pooled)
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )

    def pool(
        self, hidden: torch.Tensor, attention_mask: torch.Tensor | None, packed: PackedBatch | None
    ) -> torch.Tensor:
        """(sequences, hidden): per row or packed sequence, its first real token ("cls") or its real tokens' mean."""
        if attention_mask is not None and attention_mask.dim() != 2 and self.config.classifier_pooling == "mean":
            raise ValueError(
                "classifier_pooling='mean' averages the tokens of a 2D padding mask (batch, seq); got attention_mask "
                f"of shape {tuple(attention_mask.shape)}. Pass the 2D mask, or use classifier_pooling='cls'."
            )
        if packed is None:
            if self.config.classifier_pooling == "cls":
                if attention_mask is None or attention_mask.dim() != 2:
                    return hidden[:, 0]
                # each row's first real token: slot 0 with right padding, the first after the pads with left padding
                first = (attention_mask != 0).int().argmax(dim=1)
                return hidden[torch.arange(hidden.shape[0], device=hidden.device), first]
            if attention_mask is None:
                return hidden.mean(dim=1)
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
            return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)
        hidden = end_to_end(hidden, 1)[0]  # (rows * seq, hidden): the sequences in order
        if self.config.classifier_pooling == "cls":  # each packed sequence's first token
            return hidden[packed.first_tokens()]
        weights = hidden.new_ones(hidden.shape[0]) if attention_mask is None else attention_mask.reshape(-1).to(hidden)
        sequence, count = packed.sequence_ids.reshape(-1), packed.num_sequences
        sums = hidden.new_zeros(count, hidden.shape[-1]).index_add(0, sequence, hidden * weights[:, None])
        counts = hidden.new_zeros(count).index_add(0, sequence, weights)
        return sums / counts.clamp(min=1).unsqueeze(-1)


@auto_docstring
class RoFormerExtForMultipleChoice(RoFormerExtPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.roformer = self.build_base_model(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultipleChoiceModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`):
            One row of tokens per choice.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Index of the correct choice.
        """
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self.encode(*(None if x is None else x.reshape(-1, *x.shape[2:]) for x in inputs), **kwargs)
        hidden = outputs.last_hidden_state
        # transformers' RoFormerForMultipleChoice summarises with the LAST token; converted checkpoints keep that.
        pooled = hidden[:, -1] if self.config.multiple_choice_pooling == "last" else hidden[:, 0]
        logits = self.classifier(self.dropout(pooled)).view(-1, num_choices)
        loss = F.cross_entropy(logits.float(), labels) if labels is not None else None
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class RoFormerExtForTokenClassification(RoFormerExtPreTrainedModel):
    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roformer = self.build_base_model(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> TokenClassifierOutput:
        outputs = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = self.loss_function(logits, labels, self.config, **kwargs) if labels is not None else None
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class RoFormerExtForQuestionAnswering(RoFormerExtPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roformer = self.build_base_model(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput:
        tokens = input_ids if input_ids is not None else inputs_embeds
        packed = self.describe_batch(tokens, attention_mask, position_ids, kwargs)
        outputs = self.encode(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, packed_batch=packed, **kwargs
        )
        logits = self.qa_outputs(outputs.last_hidden_state)
        # padding holds no answer: the dtype's minimum, padded or packed (then as (sequences, longest)): same loss
        fill = torch.finfo(logits.dtype).min
        if attention_mask is not None and attention_mask.dim() == 2:
            logits = logits.masked_fill(attention_mask[..., None] == 0, fill)
        if packed is not None:
            logits = unpack(end_to_end(logits, 1), packed.cu_seq_lens, fill=fill)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
