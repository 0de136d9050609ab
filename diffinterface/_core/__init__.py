"""What every layer shares: array families and conversions (``arrays``), structured inputs and outputs
flattened to one vector (``structure``), extra arguments (``contexts``) and the library's errors
(``errors``). Nothing here imports the frontend, the adapters or an engine."""
