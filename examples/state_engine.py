"""The state engine on your own classes: declare, save, load, inspect.

    python examples/state_engine.py

Savable classes are plain dataclasses with ``@state.savable`` on top.  References
between them (including cycles) survive a round trip with their identity; fields the
engine cannot save are marked ``nosave`` and rebuilt in ``__after_load__``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ckpt import state


@state.savable
@dataclass(eq=False)
class Account:
    owner: str
    balance: int
    history: list[int] = field(default_factory=list)
    bank: Bank | None = None
    # a lock cannot be saved; it is rebuilt after load
    lock: threading.Lock = state.field(nosave=True, default_factory=threading.Lock)  # noqa: RUF009

    def deposit(self, amount: int) -> None:
        with self.lock:
            self.balance += amount
            self.history.append(amount)

    def __after_load__(self) -> None:
        self.lock = threading.Lock()


@state.savable
@dataclass(eq=False)
class Bank:
    name: str
    accounts: dict[str, Account] = field(default_factory=dict)

    def open(self, owner: str) -> Account:
        acct = Account(owner, 0, bank=self)  # a cycle: bank -> account -> bank
        self.accounts[owner] = acct
        return acct


def main() -> None:
    bank = Bank("example")
    alice, bob = bank.open("alice"), bank.open("bob")
    alice.deposit(100)
    bob.deposit(30)
    alice.deposit(-20)

    for engine in state.ENGINES:
        stats = state.Stats()
        data = state.dumps(bank, engine=engine, stats=stats)
        copy = state.loads(data, engine=engine)
        a = copy.accounts["alice"]
        assert a.bank is copy, "identity and cycles are preserved"
        assert (a.balance, a.history) == (80, [100, -20])
        a.deposit(5)  # the rebuilt lock works
        print(f"{engine}: {len(data)} bytes, alice has {a.balance} after a deposit")

    view = state.inspect_stream(state.dumps(bank))
    print("types in the stream:", ", ".join(f"{t.name} x{t.count}" for t in view.types))
    for obj in view.objects():
        print(f"  #{obj.id} {obj.type} {obj.fields}")


if __name__ == "__main__":
    main()
