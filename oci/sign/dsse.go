package sign

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// PayloadTypeInToto is the DSSE payload type of an in-toto statement, the only one an
// attestation carries (cosign refuses any other).
const PayloadTypeInToto = "application/vnd.in-toto+json"

// ErrInvalidEnvelope: bytes that are not a DSSE envelope this package can check.
var ErrInvalidEnvelope = errors.New("invalid DSSE envelope")

// Envelope is a DSSE v1 envelope (Dead Simple Signing Envelope,
// github.com/secure-systems-lab/dsse), as cosign stores an attestation: the payload,
// its type, and signatures over PAE(payloadType, payload). Field order and names are
// the bytes cosign writes.
type Envelope struct {
	PayloadType string              `json:"payloadType"`
	Payload     string              `json:"payload"` // standard base64 of the payload bytes
	Signatures  []EnvelopeSignature `json:"signatures"`
}

// EnvelopeSignature is one signature of an Envelope.
type EnvelopeSignature struct {
	KeyID string `json:"keyid"` // cosign leaves it empty
	Sig   string `json:"sig"`   // standard base64 of the signature of PAE(payloadType, payload)
}

// PAE is DSSE's pre-authentication encoding of a payload, the bytes a DSSE signature
// signs: "DSSEv1 <len(type)> <type> <len(payload)> <payload>", lengths in decimal bytes.
func PAE(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payloadType) + len(payload) + 32)
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// SignEnvelope signs payload with signer and returns the JSON of the envelope holding
// it, byte for byte what cosign's DSSE signer (sigstore's dsse.WrapSigner) writes:
//
//	{"payloadType":TYPE,"payload":BASE64,"signatures":[{"keyid":"","sig":BASE64}]}
func SignEnvelope(signer Signer, payloadType string, payload []byte) ([]byte, error) {
	if signer == nil {
		return nil, errors.New("signing envelope: no signer")
	}
	sig, err := signMessage(signer, PAE(payloadType, payload))
	if err != nil {
		return nil, fmt.Errorf("signing envelope: %w", err)
	}
	b, err := json.Marshal(Envelope{
		PayloadType: payloadType,
		Payload:     base64.StdEncoding.EncodeToString(payload),
		Signatures:  []EnvelopeSignature{{Sig: base64.StdEncoding.EncodeToString(sig)}},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding envelope: %w", err)
	}
	return b, nil
}

// ParseEnvelope decodes an envelope and its payload. It refuses what cosign's verifier
// cannot check either: no signature, a payload or signature that is not standard
// base64. Errors wrap ErrInvalidEnvelope.
func ParseEnvelope(b []byte) (*Envelope, []byte, error) {
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, nil, fmt.Errorf("%w: decoding JSON: %v", ErrInvalidEnvelope, err)
	}
	if len(e.Signatures) == 0 {
		return nil, nil, fmt.Errorf("%w: no signature", ErrInvalidEnvelope)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: payload is not base64: %v", ErrInvalidEnvelope, err)
	}
	for i, s := range e.Signatures {
		if _, err := base64.StdEncoding.DecodeString(s.Sig); err != nil || s.Sig == "" {
			return nil, nil, fmt.Errorf("%w: signature %d is not base64", ErrInvalidEnvelope, i)
		}
	}
	return &e, payload, nil
}

// verifiedBy returns the first key of v that verifies one of e's signatures over
// PAE(e.PayloadType, payload), as DSSE's verifier accepts an envelope with any one good
// signature; nil if none does. payload is e's decoded payload (ParseEnvelope).
func (e *Envelope) verifiedBy(v *Verifier, payload []byte) *trustedKey {
	pae := PAE(e.PayloadType, payload)
	for _, s := range e.Signatures {
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil {
			continue
		}
		for i := range v.keys {
			if verifyMessage(v.keys[i].pub, pae, sig) {
				return &v.keys[i]
			}
		}
	}
	return nil
}
