"""The built-in attacks of the scorecard, registered in the order it runs them.

Importing this module registers them (:data:`pfd.audit.contract.CHECKS`): linkability, its
hubness-corrected form, the rank of the source, class-level linking, reconstruction
(:mod:`pfd.attacks.linkability.attacks`),
attribute recovery (:mod:`pfd.attacks.attributes.attack`) and membership
(:mod:`pfd.attacks.membership.attack`). It loads only their configs, so the CLI can make
``pfd attack``'s options at start-up without torch.
"""

import pfd.attacks.linkability.attacks  # noqa: F401 - linkability, hubness, source_rank, class_link, reconstruction
import pfd.attacks.attributes.attack  # noqa: F401 - attributes
import pfd.attacks.membership.attack  # noqa: F401 - membership
