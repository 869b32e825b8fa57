"""Jobs on Ray: the Ray Train driver (`train_run.run_training`) and the function its workers run
(`train_worker`), and the studies made of training runs (`frozen_vs_finetuned`). They put the layers below
together: the objective's recipe (`objectives`), the Ray-free engine (`train`), validation (`evaluation`) and
MLflow (`tracking`); pipelines and studies (`pipeline`, `tune`) call them."""
