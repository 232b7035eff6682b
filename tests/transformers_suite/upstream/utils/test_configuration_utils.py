"""Stand-in for transformers' tests/utils/test_configuration_utils.py: `config_common_kwargs`, every public
`PreTrainedConfig` field off its default, so that `ConfigTester` sees a dropped one (checked complete by
test_config_common_kwargs_cover_pretrained_config)."""

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["RoFormerExtModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
