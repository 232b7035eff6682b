"""transformers' own common model tests (ModelTesterMixin, ConfigTester) run on every roformer-ext class."""
