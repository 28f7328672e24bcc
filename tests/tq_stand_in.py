"""TransferQueue stood in by a dict, for tests that run verl's v1 trainer methods on the CPU in a child process
(test_step_signal.py, test_move_credit.py): ``kv_batch_get`` / ``kv_batch_put`` over the rows the agent loop put."""

from __future__ import annotations

from transfer_queue.metadata import KVBatchMeta
from verl.utils.tensordict_utils import list_of_dict_to_tensordict


class StandInQueue:
    """Rows by key, each a dict of fields; ``broken_fields``: a read that selects one of them raises, as a queue
    gone away would. ``reads``: the fields each ``kv_batch_get`` selected, in call order."""

    def __init__(self, broken_fields: tuple[str, ...] = ()) -> None:
        self.rows: dict = {}
        self.broken_fields = broken_fields
        self.reads: list[list[str]] = []

    def kv_batch_put(self, keys, partition_id, fields, tags=None):
        for i, key in enumerate(keys):
            for name in fields.keys():
                self.rows[key][name] = fields[name][i]
        return KVBatchMeta(keys=list(keys), tags=tags or [{}] * len(keys), partition_id=partition_id)

    def kv_batch_get(self, keys, partition_id, select_fields):
        self.reads.append(list(select_fields))
        if set(select_fields) & set(self.broken_fields):
            raise ConnectionError("TransferQueue went away")
        present = [f for f in select_fields if all(f in self.rows[k] for k in keys)]
        return list_of_dict_to_tensordict([{f: self.rows[k][f] for f in present} for k in keys])
