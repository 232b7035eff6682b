"""The tiny vision-text model the vision tests build: sizes, placeholder ids and the flattened patch width."""

IMAGE, VIDEO = 97, 98
SIZES = dict(
    vocab_size=99,
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    patch_size=2,
    temporal_patch_size=2,
    num_channels=3,
    image_token_id=IMAGE,
    video_token_id=VIDEO,
)
#: channels × temporal patch × patch × patch: one row of pixel_values
PATCH_DIM = 3 * 2 * 2 * 2
