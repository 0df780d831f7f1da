"""Self-checking exercises: one module per chapter (``ch01`` ... ``ch05``), built on :mod:`._checking`.

In a chapter::

    from transformer_lib.exercises import ch04 as ex
    def layer_norm(x, weight, bias, eps=1e-5):
        ...                          # the reader's code
    ex.check_layer_norm(layer_norm)  # says precisely what is wrong, or that it is right
"""
