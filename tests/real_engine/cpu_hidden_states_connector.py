"""The test rig's extraction connector: vLLM's example hidden-states connector, its copy made with
plain torch (the stock one pins memory and uses CUDA streams, which the CPU backend lacks)."""

import fcntl
import os
from functools import partial

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    extract_from_kv_cache,
)


class _Done:
    """The copy is made before the write is submitted: done at once, as a CUDA event's query says."""

    def synchronize(self):
        pass

    def query(self):
        return True


class CpuHiddenStatesConnector(ExampleHiddenStatesConnector):
    def _submit_async_write(self, pending) -> None:
        if not self._is_tp_rank_zero:
            return
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(0, self._block_size, dtype=torch.long)
        slots = (offsets.reshape((1, -1)) + blocks.reshape((-1, 1)) * self._block_size).flatten()
        n = pending.token_ids.shape[0]
        hidden = extract_from_kv_cache(self._kv_cache, slots, n).clone()
        tensors = {"hidden_states": hidden, "token_ids": pending.token_ids.clone()}
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(
                pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644
            )
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        done = _Done()
        future = self._executor.submit(
            self._write_tensors, tensors, done, pending.filename, lock_fd
        )
        self._req_copy_events[pending.req_id] = done
        self._req_futures[pending.req_id] = future
        future.add_done_callback(partial(self._on_write_done, pending.req_id))
