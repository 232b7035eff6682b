"""Your own data, the way transformers' examples take it: `--dataset_name` or `--train_file` & co.

`--dataset_name` is a Hub dataset, a local folder of data files (csv / json / jsonl / parquet / txt, split
by file name as `datasets` does), or a folder written by `save_to_disk`. `--train_file`,
`--validation_file` and `--test_file` are single files (csv, tsv, json / jsonl, parquet; txt for text
corpora; `.gz` / `.bz2` / `.xz` / `.zst` compressed too). Only a train split is required: the validation
split is then `--validation_split_percentage` of it. Without any of these the script's bundled corpus is
used (offline).
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

logger = logging.getLogger(__name__)

COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
#: file extension -> (`datasets` builder, extra builder arguments)
BUILDERS = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
    ".parquet": ("parquet", {}),
    ".txt": ("text", {}),
}


@dataclass
class DataSourceArguments:
    """Where the data comes from: transformers' example flags, or nothing for the bundled corpus."""

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A Hub dataset, a local folder of data files, or a folder written by save_to_disk."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "The Hub dataset's configuration."})
    train_file: str | None = field(
        default=None, metadata={"help": "Training data: csv, tsv, json/jsonl or parquet (txt for text corpora)."}
    )
    validation_file: str | None = field(default=None, metadata={"help": "Validation data, same formats."})
    test_file: str | None = field(default=None, metadata={"help": "Test data, same formats (labels optional)."})
    validation_split_percentage: int = field(
        default=5, metadata={"help": "Without a validation split: this percentage of train becomes validation."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace a trained model already in --output_dir."}
    )

    def __post_init__(self) -> None:
        files = [f for f in (self.train_file, self.validation_file, self.test_file) if f]
        if self.dataset_name and files:
            raise ValueError("Give either --dataset_name or --train_file / --validation_file / --test_file, not both.")
        if self.dataset_config_name and not self.dataset_name:
            raise ValueError("--dataset_config_name needs --dataset_name.")
        if not 0 <= self.validation_split_percentage < 100:
            raise ValueError(
                f"--validation_split_percentage must be in [0, 100), not {self.validation_split_percentage}."
            )
        for path in files:
            builder_for(path)  # an unsupported format fails now, before any work

    @property
    def own_data(self) -> bool:
        """Whether the user gave data (else the bundled corpus is used)."""
        return bool(self.dataset_name or self.train_file or self.validation_file or self.test_file)


@dataclass
class DataArguments(DataSourceArguments):
    """`DataSourceArguments` plus how long an input may be, how much of the data to use, and its language."""

    max_seq_length: int = field(default=128, metadata={"help": "Tokens per input after truncation."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only N validation rows."})
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Use only N test rows (default: --max_eval_samples)."}
    )
    language: str | None = field(
        default=None, metadata={"help": "Language code(s) of your data for the model card, e.g. 'zh' or 'en,fr'."}
    )

    @property
    def languages(self) -> str | list[str] | None:
        """`--language` for the card's metadata: one code, a list of codes, or None."""
        codes = [code.strip() for code in (self.language or "").split(",") if code.strip()]
        return codes[0] if len(codes) == 1 else codes or None


def builder_for(path: str) -> tuple[str, dict]:
    """The `datasets` builder that reads `path`, by its extension (compression suffixes looked through)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes.pop()
    extension = suffixes[-1] if suffixes else ""
    if extension not in BUILDERS:
        raise ValueError(
            f"Cannot read {path!r}: supported data files are {', '.join(BUILDERS)} "
            f"(optionally {', '.join(COMPRESSIONS)} compressed)."
        )
    return BUILDERS[extension]


def is_saved_dataset(folder: Path) -> bool:
    """A folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def load_raw_datasets(data_args: DataSourceArguments, allow_text: bool = False) -> DatasetDict:
    """The user's data as a DatasetDict with the splits it has (train / validation / test)."""
    if data_args.dataset_name:
        folder = Path(data_args.dataset_name)
        if folder.is_dir() and is_saved_dataset(folder):
            loaded = load_from_disk(str(folder))
            raw = loaded if isinstance(loaded, DatasetDict) else DatasetDict({"train": loaded})
        else:  # a local folder of data files, or a Hub dataset
            raw = load_dataset(data_args.dataset_name, data_args.dataset_config_name)
    else:
        files = {
            split: path
            for split, path in (
                ("train", data_args.train_file),
                ("validation", data_args.validation_file),
                ("test", data_args.test_file),
            )
            if path
        }
        for path in files.values():
            if not Path(path).is_file():
                raise ValueError(f"Data file {path!r} does not exist.")
        builder, kwargs = builder_for(next(iter(files.values())))
        if any(builder_for(path) != (builder, kwargs) for path in files.values()):
            raise ValueError(f"All data files must have the same format, got {sorted(files.values())}.")
        if builder == "text" and not allow_text:
            raise ValueError("Plain .txt files hold no labels: give csv, tsv, json/jsonl or parquet files.")
        raw = load_dataset(builder, data_files=files, **kwargs)
    if not isinstance(raw, DatasetDict):
        raw = DatasetDict({"train": raw})
    unknown = set(raw) - {"train", "validation", "test"}
    if "validation" not in raw and "valid" in raw:
        raw["validation"] = raw.pop("valid")
        unknown.discard("valid")
    if unknown:
        logger.warning("ignoring the splits %s (the examples use train, validation and test)", sorted(unknown))
        for split in unknown:
            raw.pop(split)
    return raw


def carve_validation(raw: DatasetDict, percentage: int, seed: int) -> DatasetDict:
    """Without a validation split, a seeded random `percentage`% of train becomes one (as run_mlm does)."""
    if "validation" in raw or "train" not in raw or not percentage or len(raw["train"]) < 2:
        return raw
    size = max(1, round(len(raw["train"]) * percentage / 100))
    split = raw["train"].train_test_split(test_size=size, seed=seed)
    raw["train"], raw["validation"] = split["train"], split["test"]
    logger.info("no validation split: %d of the training rows (%d%%) are held out for it", size, percentage)
    return raw


def limit_splits(raw: DatasetDict, data_args: DataArguments, seed: int) -> DatasetDict:
    """Seeded random subsets per `--max_train_samples` / `--max_eval_samples` / `--max_predict_samples`."""
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_predict_samples
        if data_args.max_predict_samples is not None
        else data_args.max_eval_samples,
    }
    for split, limit in limits.items():
        if split in raw and limit is not None:
            raw[split] = raw[split].shuffle(seed=seed).select(range(min(limit, len(raw[split]))))
    return raw


def describe_source(data_args: DataSourceArguments) -> tuple[str, list[str]]:
    """(a sentence for the model card, names for its `datasets` metadata), without local absolute paths."""
    if data_args.dataset_name:
        folder = Path(data_args.dataset_name)
        if folder.exists():
            return f"the local dataset `{folder.name}`", [folder.name]
        config = f" (configuration `{data_args.dataset_config_name}`)" if data_args.dataset_config_name else ""
        return f"the Hub dataset `{data_args.dataset_name}`{config}", [data_args.dataset_name]
    files = [
        (split, Path(path).name)
        for split, path in (
            ("train", data_args.train_file),
            ("validation", data_args.validation_file),
            ("test", data_args.test_file),
        )
        if path
    ]
    return "the files " + ", ".join(f"`{name}` ({split})" for split, name in files), [name for _, name in files]


def split_sizes(data: DatasetDict | dict[str, Dataset]) -> dict[str, int]:
    return {split: len(data[split]) for split in ("train", "validation", "test") if split in data}


def sizes_text(data: DatasetDict | dict[str, Dataset]) -> str:
    """`train 1,000 / validation 50 / test 80` rows, for the model card."""
    return " / ".join(f"{split} {count:,}" for split, count in split_sizes(data).items())
