"""Why a compile missed: :mod:`.explain` compares its key with the nearest stored entry's."""
