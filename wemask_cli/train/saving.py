"""A run's saves, recorded by name as they are written: the trainer writes each checkpoint into a staging folder
(OutputClaim.staging), wemask adds its records there (the run record last) and moves the checkpoint into place, so
that the manifest lists only what the save wrote, whatever the user adds to the folder meanwhile; the final save goes
the same way. The checkpoint rotation of --save-total-limit is done here, after the move: a checkpoint holding a
file wemask did not write is kept (one warning). Imported only when a run starts."""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformers import TrainerCallback

from wemask_cli.compat.transformers import checkpoint_save, stage_checkpoint_saves
from wemask_cli.outputs import STAGING_NAME, atomic_write_json
from wemask_cli.runtime.progress import warn
from wemask_cli.train.checkpoints import PREFIX, TRAINER_STATE, barrier, checkpoints


class StagedSaves(TrainerCallback):
    """Installed on a trainer: its checkpoint saves staged and moved in (see the module docstring)."""

    def __init__(self, trainer, claim, record):
        self.trainer, self.claim, self.record = trainer, claim, record
        self.save_checkpoint = checkpoint_save(trainer)
        self.warned: set[str] = set()  # checkpoints kept for the user's files
        # where the trainer saves checkpoints (checkpoint-N, then moved in) and rotates them at the end of training
        # (none there: that rotation is finish_rotation's)
        stage_checkpoint_saves(trainer, self._save_checkpoint, lambda: str(claim.path / STAGING_NAME))
        write_card = trainer.create_model_card

        def create_model_card(*args, **kwargs):  # TRL writes its model card beside the checkpoints, by this name
            write_card(*args, **kwargs)
            if claim.active and (claim.path / "README.md").is_file():
                claim.record("README.md")

        trainer.create_model_card = create_model_card
        trainer.add_callback(self)

    def on_train_end(self, args, state, control, **kwargs):
        self.finish_rotation()
        return control

    def _save_checkpoint(self, model, trial) -> None:
        trainer, args = self.trainer, self.trainer.args
        name = f"{PREFIX}-{trainer.state.global_step}"
        staged = self.claim.staging(name)
        limit, args.save_total_limit = args.save_total_limit, None  # rotated below, once the checkpoint is in place
        try:
            self.save_checkpoint(model, trial)
        finally:
            args.save_total_limit = limit
        self._fix_best(staged)
        if trainer.is_world_process_zero():
            self.record.write(staged, trainer.model)  # the run record last: the checkpoint's completion mark
        self._move_in(staged, name)
        if args.should_save and self.claim.active:
            self.rotate(limit)

    def _fix_best(self, staged: Path) -> None:
        """The trainer names the best checkpoint by the folder it saved into: named again by its place in the run."""
        state = self.trainer.state
        best = state.best_model_checkpoint
        if not best or Path(best).parent != staged.parent:
            return
        state.best_model_checkpoint = os.path.join(self.trainer.args.output_dir, Path(best).name)
        saved = staged / TRAINER_STATE
        if self.trainer.is_world_process_zero() and saved.is_file():
            data = json.loads(saved.read_text())
            data["best_model_checkpoint"] = state.best_model_checkpoint
            atomic_write_json(saved, data)

    def save_final(self, write_records):
        """The final save: the trainer's model (every process), then `write_records(folder)` on the main process (the
        tokenizer, records, metrics.json), all moved into the output folder (metrics.json last); returns what
        write_records returned."""
        staged = self.claim.staging("final")
        self.trainer.save_model(str(staged))
        result = write_records(staged) if self.trainer.is_world_process_zero() else None
        self._move_in(staged, None)
        return result

    def _move_in(self, staged: Path, rel: str | None) -> None:
        """Once every process has written: the main process moves `staged` to `rel` (None: its files into the output
        folder), then the first process of each other node moves what is left there (a node with its own folder)."""
        args, main = self.trainer.args, self.trainer.is_world_process_zero()
        barrier(args)
        if main:
            self._move(staged, rel)
        barrier(args)
        if not main and args.local_process_index == 0:
            self._move(staged, rel)

    def _move(self, staged: Path, rel: str | None) -> None:
        if rel is not None and staged.exists():
            self.claim.move_in(staged, rel)
        elif rel is None and staged.is_dir():
            self.claim.move_all_in(staged)
        try:
            staged.parent.rmdir()
        except OSError:
            pass

    def rotate(self, limit: int | None) -> None:
        """--save-total-limit: the oldest checkpoints deleted down to the limit, the newest and the best kept (as
        transformers' rotation, by step), each deleted only as --overwrite deletes; one holding a file wemask did not
        write is kept, with one warning."""
        if not limit or limit <= 0:
            return
        found = checkpoints(Path(self.trainer.args.output_dir))  # newest first
        best = self.trainer.state.best_model_checkpoint
        protected = {found[0].resolve()} | ({Path(best).resolve()} if best else set())
        remaining = len(found)
        for path in reversed(found):
            if remaining <= max(limit, len(protected)):
                break
            if path.resolve() not in protected and self._delete(path):
                remaining -= 1

    def finish_rotation(self) -> None:
        """The trainer's last rotation, after training: with --save-total-limit 1 and a best checkpoint, only the best
        is kept (each other one deleted as in `rotate`)."""
        args, best = self.trainer.args, self.trainer.state.best_model_checkpoint
        if not (args.should_save and self.claim.active and best and args.save_total_limit == 1):
            return
        for path in checkpoints(Path(args.output_dir)):
            if path.resolve() != Path(best).resolve():
                self._delete(path)

    def _delete(self, path: Path) -> bool:
        """Delete a rotated checkpoint, unless it holds files wemask did not write (then one warning)."""
        kept = self.claim.remove(path.name)
        if kept and path.name not in self.warned:
            self.warned.add(path.name)
            warn(f"--save-total-limit: keeping {path} although it is due for deletion: it holds files wemask did "
                 f"not write ({', '.join(kept[:3])}); move them away and delete the checkpoint yourself")
        return not kept
