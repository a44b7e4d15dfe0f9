"""A run's data, prepared step by step; each step is a function of the plain values it uses and returns what the
next step receives (uedp.pipeline.prepare, the one place that reads a RunConfig, calls them in this order):

1. `corpus`: the dataset's sentences materialized as Parquet (`load_corpus`) and the participating users
   (`participants`); the rows of a split restricted to them (`read_split`).
2. `entities`: detected entities are cached by uedp.entities.annotations; `EntityPolicy` (entities.protected
   less entities.public) turns annotations into protected entity sets, and `entity_totals` counts the paper's
   W_e and W_s over the participants' training sentences.
3. `tokenizer`: the run's tokenizer (`make_run_tokenizer`: public, private split or a pretrained model's own) and
   its file (`save_run_tokenizer`, `load_tokenizer`).
4. `manifest`: the cache key of the prepared data (`data_key`) and the manifest naming its files (`Manifest`).
5. `encoding` and `users`: sentences encoded as one padded id matrix (`encode_sentences`) and one data owner's
   training sentences with their entity sets (`UserData`).
"""
