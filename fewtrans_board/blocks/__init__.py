"""Reusable building blocks of transfer methods, below every method and above the contract.

The FewTrans training recipe (:mod:`.training`), batched HPE (:mod:`.lockstep`: plans, the
lockstep trainer, stacked Adam, the memory planner), full and partial fine-tuning
(:mod:`.finetune`), ViT hook points and PEFT parts (:mod:`.vit_parts`, :mod:`.vit_hooks`,
:mod:`.bottleneck`, :mod:`.deep_prompts`, :mod:`.unfuse`, :mod:`.layers`), CLIP text-side parts
(:mod:`.clip_common`, :mod:`.prompter`, :mod:`.clip_training`) and batched linear heads
(:mod:`.batched_heads`). Plugins reach the stable ones through :mod:`fewtrans_board.toolkit`.
"""
