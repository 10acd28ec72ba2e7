package bank

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// ErrInvalidDocument reports a string that is neither a valid CPF nor a
// valid CNPJ.
var ErrInvalidDocument = errors.New("bank: invalid document")

// Document is a normalized CPF (11 digits) or CNPJ (12 alphanumerics and 2
// check digits), the account's identity at login. It never appears in logs:
// its LogValue is redacted.
type Document string

// LogValue redacts the document, keeping only its kind.
func (d Document) LogValue() slog.Value {
	if len(d) == 11 {
		return slog.StringValue("cpf:***")
	}
	return slog.StringValue("cnpj:***")
}

// maxDocumentInput bounds the input scanned, so a megabyte of punctuation
// costs nothing.
const maxDocumentInput = 32

// ParseDocument normalizes s and checks its check digits. Punctuation
// ('.', '-', '/', spaces) is ignored and letters are upper-cased. A CPF is
// 11 ASCII digits with two mod-11 check digits, not all equal; a CNPJ is
// [0-9A-Z]{12}[0-9]{2}, the alphanumeric form valid from July 2026, with
// check digits over each character's ASCII code minus 48.
func ParseDocument(s string) (Document, error) {
	if len(s) > maxDocumentInput {
		return "", fmt.Errorf("%w: %d bytes is too long", ErrInvalidDocument, len(s))
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' || c == '-' || c == '/' || c == ' ':
		case c >= '0' && c <= '9', c >= 'A' && c <= 'Z':
			b.WriteByte(c)
		case c >= 'a' && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		default:
			return "", fmt.Errorf("%w: unexpected character at byte %d", ErrInvalidDocument, i)
		}
	}
	d := b.String()
	switch len(d) {
	case 11:
		if !allDigits(d) {
			return "", fmt.Errorf("%w: a CPF has only digits", ErrInvalidDocument)
		}
		if strings.Count(d, d[:1]) == len(d) {
			return "", fmt.Errorf("%w: a CPF of eleven equal digits", ErrInvalidDocument)
		}
		if d[9] != checkDigit(d[:9], cpfWeights) || d[10] != checkDigit(d[:10], cpfWeights) {
			return "", fmt.Errorf("%w: CPF check digits do not match", ErrInvalidDocument)
		}
	case 14:
		if !allDigits(d[12:]) {
			return "", fmt.Errorf("%w: a CNPJ ends in two digits", ErrInvalidDocument)
		}
		if strings.Count(d, d[:1]) == len(d) {
			return "", fmt.Errorf("%w: a CNPJ of fourteen equal characters", ErrInvalidDocument)
		}
		if d[12] != checkDigit(d[:12], cnpjWeights) || d[13] != checkDigit(d[:13], cnpjWeights) {
			return "", fmt.Errorf("%w: CNPJ check digits do not match", ErrInvalidDocument)
		}
	default:
		return "", fmt.Errorf("%w: %d characters; a CPF has 11, a CNPJ 14", ErrInvalidDocument, len(d))
	}
	return Document(d), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// cpfWeights weighs a CPF's digits from the right: 2, 3, 4, ...
func cpfWeights(i int) int { return i + 2 }

// cnpjWeights weighs a CNPJ's characters from the right: 2..9, then again.
func cnpjWeights(i int) int { return i%8 + 2 }

// checkDigit computes the mod-11 check digit of s, whose characters count
// for their ASCII code minus 48 ('0' is 0, 'A' is 17), weighted from the
// right.
func checkDigit(s string, weight func(i int) int) byte {
	sum := 0
	for i := range len(s) {
		sum += int(s[len(s)-1-i]-'0') * weight(i)
	}
	if r := sum % 11; r >= 2 {
		return byte('0' + 11 - r)
	}
	return '0'
}
