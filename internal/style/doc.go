// Package style holds no code: its tests check rules of CONTRIBUTING.md
// that concern the whole tree rather than one package.
package style
