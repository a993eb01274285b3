"""A diagnosis as `rankwatch alert` received it: the typed object every sink and page reads, with
the JSON object it came as. That object is what a webhook forwards and `/incidents?format=json`
serves: re-encoding the typed one would drop the fields a newer engine added.

What is accepted is `content.check_diagnosis`'s rule (an id, a job, the parts alerts read of the
right kind), looser than a strict decode: a field of the wrong type elsewhere reads as its
default (`rankwatch.diagnosis.lenient`) rather than losing the alert."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rankwatch import diagnosis as rd
from rankwatch.alert.content import check_diagnosis


@dataclass(frozen=True, slots=True)
class Received:
    doc: dict[str, Any]  # the JSON object as published
    diagnosis: rd.Diagnosis

    @property
    def id(self) -> str:
        return self.diagnosis.id


# What the alert's entry points take: a parsed record is checked and read there.
AnyReceived = Received | Mapping[str, Any]
AnyDiagnosis = AnyReceived | rd.Diagnosis


def receive(value: Any) -> Received:
    """A parsed record of the diagnoses topic; BadDiagnosis when alerts cannot use it."""
    doc = check_diagnosis(value)
    return Received(doc, rd.lenient(doc))


def received(d: AnyReceived) -> Received:
    return d if isinstance(d, Received) else receive(d)


def typed(d: AnyDiagnosis) -> rd.Diagnosis:
    return d if isinstance(d, rd.Diagnosis) else received(d).diagnosis
