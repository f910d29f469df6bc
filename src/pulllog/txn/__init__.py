"""The transaction coordinator (KIP-98): transactional ids, their producer ids and epochs, and
the two-phase commit of each transaction. ``state`` is the state machine, ``records`` the
``__transaction_state`` formats, ``coordinator`` the coordinator itself. Importing this package
imports nothing: the broker loads the coordinator when the first transactional request comes,
or at start when ``__transaction_state`` exists."""
