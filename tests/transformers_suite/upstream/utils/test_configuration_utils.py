"""Stand-in for transformers' tests/utils/test_configuration_utils.py: only `config_common_kwargs`.

`ConfigTester.check_config_arguments_init` builds a config from these keyword arguments and checks each one is
stored. They are the public fields of transformers 5's `PreTrainedConfig`, each set to a value that differs from
its default so a field that is silently dropped shows up; `test_config_common_kwargs_cover_pretrained_config` in
../../test_roformer_ext_common.py fails when a transformers upgrade adds a field this dict lacks.
"""

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
